"""One damaged row, a store that cannot record, one unreachable login host: each is named in one
line with its fix and never hides the other jobs (issue 17). Real sqlite files, a real `ps`, and a
real SSH connection to a closed port."""

from __future__ import annotations

import json
import shlex
import sqlite3
import time

import pytest

from hpc_launch import cli, jobs
from hpc_launch.errors import StoreError, TransportError
from hpc_launch.records import DamagedRecord, JobRecord, JobStore
from hpc_launch.transport import LocalTransport, SSHTransport

from sshd import free_port


def _rec(job_id: str, cluster: str = "slurm", t: float = 1.0, **kw) -> JobRecord:
    values = dict(
        job_id=job_id,
        cluster=cluster,
        dialect="slurm",
        host="localhost",
        name="train",
        workdir="/w",
        script_path="/w/.hpc-launch/train-1.sh",
        log_path=f"/w/train.o{job_id}",
        exit_path=f"/w/train.o{job_id}.exitcode",
        submit_time=t,
        state="done",
    )
    values.update(kw)
    return JobRecord(**values)  # type: ignore[arg-type]


def _damage(path, job_id: str, column: str, value: str) -> None:
    db = sqlite3.connect(path)
    db.execute(f"UPDATE jobs SET {column} = ? WHERE job_id = ?", (value, job_id))
    db.commit()
    db.close()


def _cli(capsys, *argv: str):
    with pytest.raises(SystemExit) as exit_:
        cli.main(list(argv))
    out, err = capsys.readouterr()
    return exit_.value.code, out, err


# ---- a damaged row ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "column, value",
    [("extra", "{broken"), ("submit_argv", ""), ("extra", "[1, 2]"), ("state", "finished?")],
)
def test_a_damaged_row_is_left_out_and_named_and_the_others_are_listed(tmp_path, column, value):
    store = JobStore(tmp_path / "jobs.sqlite")
    for i in (1, 2, 3):
        store.add(_rec(str(i), t=float(i)))
    _damage(store.path, "2", column, value)
    damaged: list = []
    assert [r.job_id for r in store.list(on_damaged=damaged.append)] == ["3", "1"]
    assert [(d.cluster, d.job_id) for d in damaged] == [("slurm", "2")]
    with pytest.raises(DamagedRecord) as info:
        store.get("2")
    line = str(info.value)
    assert "\n" not in line and str(store.path) in line and f"column {column}" in line
    assert "hpc-launch adopt 2 --cluster slurm --workdir /w" in line


def test_list_shows_the_other_jobs_names_the_damaged_one_and_its_fix_works(tmp_path, capsys):
    store = JobStore()  # the state dir of this test (conftest)
    for i in (1, 2, 3):
        store.add(_rec(str(i), t=float(i)))
    _damage(store.path, "2", "extra", "{broken")

    rc, out, err = _cli(capsys, "list", "--json")
    assert rc == 0, err
    assert [j["job_id"] for j in json.loads(out)] == ["3", "1"]
    [warning] = err.strip().splitlines()
    assert warning.startswith("hpc-launch: warning: the record of job 2 on slurm") and str(store.path) in warning

    # `status` of that id is its one-line error; with another id, the other is shown too
    rc, out, err = _cli(capsys, "status", "2")
    assert rc == 3 and out == "" and err.startswith("hpc-launch: error: the record of job 2") and err.count("\n") == 1
    rc, out, err = _cli(capsys, "status", "--json", "2", "3")
    assert rc == 3 and [j["job_id"] for j in json.loads(out)] == ["3"] and "job 2" in err

    # the fix the line names records the job again
    fix = shlex.split(warning.split("record it again: ", 1)[1].rstrip(")"))
    assert fix[:2] == ["hpc-launch", "adopt"]
    assert _cli(capsys, *fix[1:])[0] == 0
    rc, out, err = _cli(capsys, "list", "--json")
    assert rc == 0 and [j["job_id"] for j in json.loads(out)][0] == "2" and "warning" not in err


# ---- a store that cannot record a job -----------------------------------------------------


@pytest.mark.parametrize(
    "breakage, needle",
    [
        ("DROP TABLE jobs", "has no `jobs` table"),
        ("ALTER TABLE jobs DROP COLUMN comment", "no column comment in its `jobs` table"),
        ("CREATE TRIGGER no_rows BEFORE INSERT ON jobs BEGIN SELECT RAISE(ABORT, 'archive only'); END", "archive"),
    ],
)
def test_the_start_up_check_refuses_a_store_that_cannot_record_a_job(tmp_path, breakage, needle):
    path = tmp_path / "jobs.sqlite"
    JobStore(path).close()
    db = sqlite3.connect(path)
    db.execute(breakage)
    db.commit()
    db.close()
    with pytest.raises(StoreError) as info:
        JobStore(path).check_writable()
    line = str(info.value)
    assert needle in line and str(path) in line and "move it aside" in line and "\n" not in line


def test_a_store_with_another_programs_jobs_table_is_refused_with_the_fix(tmp_path):
    path = tmp_path / "jobs.sqlite"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE jobs (id INTEGER PRIMARY KEY, title TEXT)")
    db.commit()
    db.close()
    with pytest.raises(StoreError, match="move it aside"):
        JobStore(path)


def test_submit_to_a_store_without_its_jobs_table_submits_nothing(tmp_path, monkeypatch, capsys):
    db = sqlite3.connect(JobStore().path)
    db.execute("DROP TABLE jobs")
    db.commit()
    db.close()
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "quick.py").write_text("print('hi')\n")
    monkeypatch.chdir(tmp_path / "work")
    rc, out, err = _cli(capsys, "submit", "--cluster", "local", "--script", "quick.py", "--gpus-per-node", "1")
    assert rc == 3 and out == "" and err.count("\n") == 1 and "has no `jobs` table" in err
    assert sorted(p.name for p in (tmp_path / "work").iterdir()) == ["quick.py"]  # no script, no log: no job


# ---- a login host that cannot be reached --------------------------------------------------


@pytest.fixture
def dead_login(tmp_path, monkeypatch):
    """An ssh alias whose port nothing listens on; connecting is tried once (the retries are
    tested in test_transport.py)."""
    config = tmp_path / "ssh_config"
    config.write_text(f"Host dead-login\n  HostName 127.0.0.1\n  Port {free_port()}\n  User nobody\n")
    monkeypatch.setenv("HPC_LAUNCH_SSH_CONFIG", str(config))
    import hpc_launch.transport

    def once(login, **kw):
        return LocalTransport() if login is None else SSHTransport(login, retries=0)

    monkeypatch.setattr(hpc_launch.transport, "open_transport", once)  # what jobs.connect.transport_for calls
    return "dead-login"


def _two_hosts(store: JobStore, tmp_path, dead_host: str):
    """A job on that host (listed first) and a local job that has ended (its exit-code file says 0)."""
    far = _rec("77", host=dead_host, state="running", comment="Running on n1", t=2.0)
    (tmp_path / "w").mkdir()
    near = _rec(
        "424242",
        cluster="local",
        dialect="none",
        state="running",
        workdir=str(tmp_path / "w"),
        script_path=str(tmp_path / "w" / ".hpc-launch" / "train-x.sh"),
        exit_path=str(tmp_path / "w" / "train.o424242.exitcode"),
        submit_time=time.time() - 60,
    )
    (tmp_path / "w" / "train.o424242.exitcode").write_text("0 train-x.sh\n")
    store.add(far)
    store.add(near)
    return far, near


def test_refresh_goes_on_past_an_unreachable_host(tmp_path, dead_login):
    store = JobStore(tmp_path / "jobs.sqlite")
    far, near = _two_hosts(store, tmp_path, dead_login)
    gone: list = []
    got = {r.job_id: r for r in jobs.refresh(store, [far, near], on_unreached=gone.append)}
    assert got["424242"].state == "done"  # refreshed although the host before it failed
    assert (got["77"].state, got["77"].comment) == ("running", "Running on n1")  # last known, untouched
    [miss] = gone
    assert (miss.cluster, miss.host, miss.job_ids, type(miss.error)) == ("slurm", dead_login, ["77"], TransportError)
    assert "not refreshed: job(s) 77 on slurm via dead-login" in miss.one_line() and "cannot connect" in miss.one_line()

    # a caller that takes no such report still gets the error, after the other hosts were refreshed
    store.update("local", "424242", state="running")
    with pytest.raises(TransportError, match="cannot connect to dead-login"):
        jobs.refresh(store, [far, store.get("424242")])
    assert store.get("424242").state == "done"


def test_status_and_list_show_every_job_and_name_the_host_not_reached(tmp_path, capsys, dead_login):
    _two_hosts(JobStore(), tmp_path, dead_login)
    rc, out, err = _cli(capsys, "status", "--json")
    states = {j["job_id"]: j["state"] for j in json.loads(out)}
    assert rc == 3 and states == {"77": "running", "424242": "done"}
    [line] = err.strip().splitlines()
    assert line.startswith("hpc-launch: warning: not refreshed: job(s) 77 on slurm via dead-login") and (
        "cannot connect to dead-login" in line
    )

    rc, out, err = _cli(capsys, "list", "--json")  # no scheduler asked: nothing to reach
    assert rc == 0 and err == "" and len(json.loads(out)) == 2
    rc, out, err = _cli(capsys, "list", "-r", "--json")
    assert rc == 3 and len(json.loads(out)) == 2 and "not refreshed: job(s) 77" in err
