"""Bad-host records (issue 33): written only from the project's own checks, read defensively (a
malformed row is skipped and named, never blocks a submit, never blamed on an --exclude nobody
gave), never naming the machine the user is on for a cluster with no scheduler; a job that only
prints a bad-host line is not said to be avoided by later jobs."""

from __future__ import annotations

import socket
import sqlite3
import time
from pathlib import Path

import pytest

from hpc_launch.jobs.state import Outcome, store_outcome
from hpc_launch.paths import no_bad_hosts_marker
from hpc_launch.prepare import prepare
from hpc_launch.records import JobRecord, JobStore
from hpc_launch.spec import JobSpec
from hpc_launch.states import JobState
from hpc_launch.transport import LocalTransport


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("HPC_LAUNCH_STATE_DIR", str(tmp_path / "state"))
    return JobStore()


def _ended(store: JobStore, tmp: Path, cluster: str, dialect: str, bad_file: str) -> JobRecord:
    """A job of `cluster` that ended failed with `bad_file` as its bad-hosts file."""
    log = tmp / "train.o9"
    rec = JobRecord(
        job_id="9",
        cluster=cluster,
        dialect=dialect,
        host="localhost",
        name="train",
        workdir=str(tmp),
        script_path=str(tmp / ".hpc-launch" / "train-1.sh"),
        log_path=str(log),
        exit_path=str(log) + ".exitcode",
        submit_time=time.time(),
        state="running",
    )
    store.add(rec)
    Path(rec.bad_hosts_path).write_text(bad_file)
    store_outcome(store, rec, Outcome(JobState.FAILED, 78), LocalTransport())
    return store.get("9", cluster)


def test_only_rows_from_the_projects_checks_with_a_host_name_are_recorded(store, tmp_path):
    rec = _ended(
        store,
        tmp_path,
        "slurm",
        "slurm",
        "n2\tpreflight: eth0 has no IPv4 address\n"
        "n3;touch /tmp/x\tpreflight: eth0 down\n"  # not a host name
        "n4\tmy training script thinks so\n"  # not one of the project's checks
        "n5\twatchdog: rank 3 hung\n",
    )
    assert sorted(b.host for b in store.bad_hosts("slurm")) == ["n2", "n5"]
    assert sorted(rec.extra["bad_hosts"]) == ["n2", "n5"]  # the summary says what was recorded


def _this_machine() -> list:
    return ["localhost", "127.0.0.1", socket.gethostname()]


def test_a_local_job_never_marks_the_machine_it_runs_on_bad(store, tmp_path):
    file = "".join(f"{h}\tpreflight: eth0 down\n" for h in _this_machine())
    _ended(store, tmp_path, "local", "none", file)
    assert store.bad_hosts("local") == []


def _put_row(store: JobStore, cluster: str, host: str, reason: str = "hang") -> None:
    """A row as an older hpc-launch (or a hand edit) left it, past today's checks."""
    store.bad_hosts()  # the store exists
    now = time.time()
    db = sqlite3.connect(str(store.path))
    db.execute(
        "INSERT INTO bad_hosts (cluster, host, reason, job_id, since, until) VALUES (?, ?, ?, ?, ?, ?)",
        (cluster, host, reason, "7", now, now + 3600),
    )
    db.commit()
    db.close()
    no_bad_hosts_marker(store.path).unlink(missing_ok=True)


def test_a_malformed_row_is_skipped_and_named_and_never_blocks_a_submit(store, tmp_path):
    _put_row(store, "slurm", "n3 n4;x")
    _put_row(store, "slurm", "n7")
    notes: list = []
    prepared = prepare(JobSpec(cluster="slurm", nodes=1, group="g", login="local", workdir="/w"), note=notes.append)
    assert "--exclude=n7" in prepared.script.submit_argv
    said = " ".join(notes)
    assert "'n3 n4;x'" in said and "skipped" in said and "hosts --forget" in said, notes


def test_hosts_lists_the_good_rows_and_names_a_malformed_one(store, capsys):
    from hpc_launch import cli

    _put_row(store, "slurm", "n3 n4;x")
    _put_row(store, "slurm", "n7")
    with pytest.raises(SystemExit) as exit_:
        cli.main(["hosts"])
    out, err = capsys.readouterr()
    assert exit_.value.code == 0 and "n7" in out and "n3 n4" not in out, out
    assert "'n3 n4;x'" in err and "--forget" in err, err


def test_a_remembered_bad_localhost_never_makes_local_unusable(store, tmp_path):
    for host in _this_machine():
        _put_row(store, "local", host, "preflight: eth0 down")
    notes: list = []
    prepared = prepare(JobSpec(cluster="local", workdir=str(tmp_path)), note=notes.append)
    assert prepared.job.nodes == 1
    assert not any("avoiding" in n for n in notes), notes


def test_a_job_that_only_prints_a_bad_host_line_is_not_said_to_be_avoided(tmp_path):
    from hpc_launch.follow import summary_block

    rec = JobRecord("9", "slurm", "slurm", "localhost", "t", "/w", "/w/s.sh", "/w/t.o9", "/w/t.o9.exitcode", 1.0)
    log = "[hpc-launch] bad host: n5: the user's own words\n"
    text = summary_block(rec, log, JobState.DONE, 0)
    assert "later jobs avoid" not in text, text
