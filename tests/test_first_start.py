"""First to start, one copy (`hpc-launch where -c A,B --submit`, hpc_launch/jobs/first_start.py):
the start gate every job of the group runs, raced for real by concurrent shells; the whole command
on this machine's `local` cluster under two names, where both jobs start at once; the watcher's
bookkeeping. On the testbed's real Slurm: tests/e2e/test_first_start_e2e.py."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from hpc_launch import cli
from hpc_launch.jobs.first_start import CLAIM_ENV
from hpc_launch.protocol import EXIT_LOST_START
from hpc_launch.prepare import prepare
from hpc_launch.records import JobRecord, JobStore
from hpc_launch.spec import JobSpec
from hpc_launch.states import JobState

TEMPLATES = Path(__file__).resolve().parents[1] / "templates"


def _script(cluster: str, claim: str | None) -> str:
    env = {CLAIM_ENV: claim} if claim else {}
    spec = JobSpec(cluster=cluster, nodes=1, group="g", workdir="/w", venv="/v", login="local", env=env)
    return prepare(spec, cwd="/w").script.text


def _gate(text: str) -> str:
    """The start gate as rendered, from its first line to the `fi` that closes it."""
    start = text.index("# --- first to start, one copy")
    end = text.index("\nfi\n", start) + 4
    return text[start:end]


def test_the_gate_is_in_the_script_only_when_the_job_is_in_a_group():
    assert "start gate" not in _script("slurm", None)  # goldens stay byte-identical
    text = _script("slurm", "/shared/w/.hpc-launch/first-x.claim")
    gate = _gate(text)
    assert "HPC_LAUNCH_CLAIM=/shared/w/.hpc-launch/first-x.claim" in gate
    assert f"exit {EXIT_LOST_START}" in gate  # the code first_start.py reads as "lost the start"
    # after the exit-code trap (the end is recorded), before any module, venv or launcher line
    assert text.index("trap 'hpc_launch_exit") < text.index(gate) < text.index("source /v/bin/activate")


def test_the_gate_file_takes_its_code_from_the_job_protocol():
    assert "exit {{ proto.EXIT_LOST_START }}\n" in (TEMPLATES / "body" / "start_gate.sh.j2").read_text()


def test_a_gated_copy_nobody_watched_reads_as_cancelled_with_the_reason(tmp_path):
    # `where --submit --no-wait`: no watcher settles the loser, its exit code alone must say it
    from hpc_launch.jobs.state import exit_hint, state_from_exit_code

    r = JobRecord("1", "ca", "slurm", "localhost", "t", "/w", "/w/s.sh", "/w/t.o1", "/w/t.o1.exitcode", 1.0)
    state = state_from_exit_code(EXIT_LOST_START, r)
    assert state.value == "cancelled"
    assert "another cluster of its group started this training first" in exit_hint(state, EXIT_LOST_START, r)


def _race(tmp_path: Path, gates: dict, rounds: int) -> list:
    """Start every cluster's gate at the same instant (they wait on one fifo-free barrier: a file
    that appears), `rounds` times on a fresh claim; the winners per round."""
    winners = []
    for r in range(rounds):
        claim = tmp_path / f"r{r}.claim"
        go = tmp_path / f"go{r}"
        procs = {}
        for cluster, gate in gates.items():
            body = gate.replace("/CLAIM", str(claim))
            ready = tmp_path / f"ready{r}-{cluster}"
            script = f"touch {ready}\nwhile [ ! -e {go} ]; do :; done\nJOB_ID=1{r}\n{body}\necho TRAINS\n"
            procs[cluster] = subprocess.Popen(
                ["bash", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
        deadline = time.monotonic() + 30  # every shell spins at the barrier: then it opens
        while not all((tmp_path / f"ready{r}-{c}").exists() for c in gates) and time.monotonic() < deadline:
            time.sleep(0.005)
        go.touch()
        outs = {c: (p.communicate(timeout=30)[0], p.returncode) for c, p in procs.items()}
        trained = [c for c, (out, rc) in outs.items() if "TRAINS" in out and rc == 0]
        lost = [c for c, (out, rc) in outs.items() if rc == EXIT_LOST_START and "another cluster started" in out]
        assert len(trained) == 1 and len(lost) == len(gates) - 1, outs
        # a loser of the same instant names the winner (it waits for the owner file the winner
        # writes just after its mkdir: CI once saw "No such file" and "a job starting job ?")
        for c in lost:
            assert f"({trained[0]} job 1{r})" in outs[c][0] and "No such file" not in outs[c][0], outs[c]
        assert (claim / "owner").read_text().split()[0] == trained[0]
        winners.append(trained[0])
    return winners


def test_gates_that_start_in_the_same_instant_let_exactly_one_train(tmp_path, monkeypatch):
    """The real rendered gate of four clusters, started together 15 times: one trains each time."""
    monkeypatch.setenv("HPC_LAUNCH_CLUSTERS_DIR", str(tmp_path / "profiles"))
    (tmp_path / "profiles").mkdir()
    names = ["sa", "sb", "sc", "sd"]
    for n in names:
        (tmp_path / "profiles" / f"{n}.yaml").write_text(f"name: {n}\nextends: slurm\n")
    gates = {n: _gate(_script(n, "/CLAIM")) for n in names}
    winners = _race(tmp_path, gates, rounds=15)
    assert len(winners) == 15


def test_a_requeued_job_of_the_winning_cluster_goes_on(tmp_path):
    gate = _gate(_script("slurm", str(tmp_path / "c.claim")))
    run = ["bash", "-c", f"JOB_ID=7\n{gate}\necho TRAINS"]
    first = subprocess.run(run, capture_output=True, text=True)
    again = subprocess.run(run, capture_output=True, text=True)  # the same cluster, later: requeue, next link
    assert "started first" in first.stdout and "TRAINS" in first.stdout
    assert "holds the claim" in again.stdout and "TRAINS" in again.stdout


# ---- the whole command on this machine: two names for `local`, both start at once ------------


@pytest.fixture
def two_locals(tmp_path, monkeypatch):
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    (profiles / "local-b.yaml").write_text("name: local-b\nextends: local\n")
    monkeypatch.setenv("HPC_LAUNCH_CLUSTERS_DIR", str(profiles))
    work = tmp_path / "work"
    work.mkdir()
    (work / "tiny.py").write_text("import os\nprint('TRAINED rank', os.environ.get('RANK'), flush=True)\n")
    monkeypatch.chdir(work)
    return work


def _wait_ended(store: JobStore, timeout: float = 60) -> list:
    deadline = time.monotonic() + timeout
    while True:
        got = store.list()
        if all(os.path.exists(r.exit_path) for r in got) or time.monotonic() > deadline:
            return got
        time.sleep(0.2)


def test_where_submit_on_two_clusters_that_start_at_once_trains_once(two_locals, capsys):
    where = ["where", "-c", "local,local-b,no-such-site", "--submit", "--script", "tiny.py", "-N", "tiny"]
    with pytest.raises(SystemExit) as exit_:
        cli.main([*where, "-g", "1"])  # one rank each: which job trains is the question, not how many ranks
    out, err = capsys.readouterr()
    assert exit_.value.code == 0, err
    group = out.strip()
    assert re.fullmatch(r"first-\d{8}-\d{6}-[0-9a-f]{4}", group)
    records = _wait_ended(JobStore())
    assert sorted(r.cluster for r in records) == ["local", "local-b"]
    assert {r.extra["first_start"] for r in records} == {group}
    logs = {r.cluster: Path(r.log_path).read_text() for r in records}
    trained = [c for c, text in logs.items() if "TRAINED" in text]
    assert len(trained) == 1, logs
    [loser] = [r for r in JobStore().list() if r.cluster not in trained]
    assert loser.state == JobState.CANCELLED.value
    assert loser.comment == f"cancelled (another cluster started first: {trained[0]} job {_job_of(trained[0])})"
    assert f"{trained[0]} job " in err and "started first and trains" in err
    assert "no-such-site: not submitted: " in err  # a cluster that cannot take it is said, the others go
    assert "TRAINED" not in logs[loser.cluster]
    # the group is one id for status, logs and cancel
    assert sorted(r.job_id for r in first_start_group(group)) == sorted(r.job_id for r in records)


def _job_of(cluster: str) -> str:
    return next(r.job_id for r in JobStore().list() if r.cluster == cluster)


def first_start_group(group: str):
    from hpc_launch.jobs import lookup

    target = lookup(JobStore(), group)
    assert target.group
    return target.records


def test_where_submit_refuses_one_cluster_named_twice(two_locals, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["where", "-c", "local,local", "--submit"])
    assert exit_.value.code == 2
    assert "needs two or more different clusters" in capsys.readouterr().err
    assert JobStore().list() == []


def test_settle_records_the_gates_losers_cancelled_and_leaves_an_unrelated_failure_as_it_was(tmp_path):
    from hpc_launch.jobs.first_start import settle
    from hpc_launch.records import JobRecord

    store = JobStore(tmp_path / "j.sqlite")

    def rec(job_id: str, state: str, code: int) -> JobRecord:
        r = JobRecord(
            job_id, f"c{job_id}", "slurm", "localhost", "t", "/w", "/w/s.sh", "/w/t.o1", "/w/t.o1.exitcode", 1.0
        )
        store.add(r)
        store.update(r.cluster, r.job_id, state=state, exit_code=code)
        return store.get(job_id, r.cluster)

    gated, broken = rec("1", "failed", EXIT_LOST_START), rec("2", "failed", 1)
    settle(store, [gated, broken], "another cluster started first: a job 9")
    assert store.get("1", "c1").state == "cancelled"
    assert store.get("1", "c1").comment == "cancelled (another cluster started first: a job 9)"
    assert (store.get("2", "c2").state, store.get("2", "c2").comment) == ("failed", "")


def test_clusters_behind_different_hosts_are_refused_before_anything_is_submitted(tmp_path, monkeypatch):
    from hpc_launch.errors import SpecError
    from hpc_launch.jobs.first_start import submit_first_start

    (tmp_path / "p").mkdir()
    for n in ("sa", "sb"):
        (tmp_path / "p" / f"{n}.yaml").write_text(f"name: {n}\nextends: slurm\n")
    monkeypatch.setenv("HPC_LAUNCH_CLUSTERS_DIR", str(tmp_path / "p"))
    opened = []
    with pytest.raises(SpecError, match=r"submitted to from different hosts \(login-a, login-b\)") as err:
        submit_first_start(
            ["sa", "sb"],
            lambda c: JobSpec(cluster=c, group="g", login=f"login-{c[1]}", workdir="/w", venv="/v"),
            transport=lambda host: opened.append(host),
        )
    assert "give the same --login for all" in str(err.value) and "\n" not in str(err.value)
    assert opened == []  # no connection, nothing written, nothing recorded
