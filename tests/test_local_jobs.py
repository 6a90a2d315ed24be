"""Jobs with no scheduler are their session, identified by their script, never guessed from a pid.

Real processes, real `ps`, real signals: a job script that sleeps stands in for training.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import msgspec
import pytest

from hpc_launch import dialects, jobs
from hpc_launch.dialects.none import release_path
from hpc_launch.records import JobRecord, JobStore
from hpc_launch.states import JobState
from hpc_launch.transport import LocalTransport

NONE = dialects.get("none")


def test_parse_keeps_only_the_jobs_own_script():
    out = (
        " 100   100 Ss   bash /w/.hpc-launch/train-a.sh\n"
        " 200   200 Ss   bash /w/.hpc-launch/train-other.sh\n"  # pid 200 reused by another job's script
        " 300   300 Zs   [bash] <defunct>\n"  # 300's script was killed; nothing reaped it
        " 301   300 S    python -m train\n 302   300 Sl   python -m train\n 303   300 Z    [python] <defunct>\n"
    )
    got = NONE._parse(out, {"100": "train-a.sh", "200": "train-b.sh", "300": "train-c.sh", "400": "train-d.sh"})
    assert got["100"].state == JobState.RUNNING
    assert "200" not in got and "400" not in got
    assert got["300"].state == JobState.RUNNING and "2 of its processes still run" in got["300"].comment


def _start(tmp: Path, body: str, name: str = "train-x.sh"):
    """Launch a script exactly the way the `none` dialect submits one."""
    (tmp / ".hpc-launch").mkdir(exist_ok=True)
    script = tmp / ".hpc-launch" / name
    script.write_text("#!/bin/bash\n" + body)
    Path(release_path(str(script))).write_text("")  # recorded: it may start (submission.release)
    argv = NONE.submit_argv(str(script), log_prefix=str(tmp / "train.o"))
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    job_id = NONE.parse_submit(out)
    return job_id, script


def test_a_release_written_as_the_submitter_ends_starts_the_job(tmp_path):
    # The launched job waits for SCRIPT.go and gives up when its submitter is gone. The submitter
    # writes .go, then ends: a wait that looked for .go just before the write and at the
    # submitter just after the end gave up and left a recorded job that never ran (seen in CI under
    # load: its log never appeared). Here `ps` itself writes .go and reports the submitter gone.
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "ps").write_text('#!/bin/sh\ntouch "$HPC_TEST_GO"\n')
    (fake / "ps").chmod(0o755)
    (tmp_path / ".hpc-launch").mkdir()
    script = tmp_path / ".hpc-launch" / "train-race.sh"
    script.write_text("#!/bin/bash\necho ran\n")
    argv = NONE.submit_argv(str(script), log_prefix=str(tmp_path / "train.o"))
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "HPC_TEST_GO": release_path(str(script))}
    env["HPC_LAUNCH_SUBMITTER"] = "999999999"  # any pid: the fake ps says it is gone
    job_id = NONE.parse_submit(subprocess.run(argv, capture_output=True, text=True, check=True, env=env).stdout)
    log = tmp_path / f"train.o{job_id}"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not (log.exists() and "ran" in log.read_text()):
        time.sleep(0.05)
    assert log.exists() and log.read_text() == "ran\n"


def _record(store, tmp, job_id, script) -> JobRecord:
    rec = JobRecord(
        job_id=job_id,
        cluster="local",
        dialect="none",
        host="localhost",
        name="train",
        workdir=str(tmp),
        script_path=str(script),
        log_path=str(tmp / f"train.o{job_id}"),
        exit_path=str(tmp / f"train.o{job_id}.exitcode"),
        submit_time=time.time(),
        state="running",
    )
    store.add(rec)
    return store.get(job_id, "local")


def _alive(pgid: str) -> list:
    return subprocess.run(["pgrep", "-g", pgid], capture_output=True, text=True).stdout.split()


def _wait(cond, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.1)
    return False


@pytest.fixture
def store(tmp_path):
    return JobStore(tmp_path / "jobs.sqlite")


def test_killing_the_job_script_with_sigkill_leaves_the_job_running_while_its_ranks_run(tmp_path, store):
    # the "ranks": a child that outlives the script (its own trap never runs: SIGKILL)
    job_id, script = _start(tmp_path, "sleep 60 &\nwait\n")
    rec = _record(store, tmp_path, job_id, script)
    t = LocalTransport()
    assert jobs.refresh(store, [rec], lambda h: t)[0].state == "running"
    assert _wait(lambda: len(_live(job_id)) == 2)  # the rank runs (killed before its fork: a plain failure)
    os.kill(int(job_id), signal.SIGKILL)
    # ended: gone, or a zombie until PID 1 reaps it (this machine's takes ~2 s)
    assert _wait(lambda: _state_of(job_id)[:1] in ("", "Z"))
    got = jobs.refresh(store, [store.get(job_id, "local")], lambda h: t)[0]
    assert got.state == "running" and "still run" in got.comment  # not "cancelled 137", not "failed"
    result = jobs.cancel(store, got, t, sleep=lambda s: time.sleep(0.2))
    assert result.state == JobState.CANCELLED
    assert _wait(lambda: not _live(job_id))


def test_sigkill_nobody_asked_for_is_a_failure_not_a_cancel(tmp_path, store):
    job_id, script = _start(tmp_path, "sleep 60\n")
    rec = _record(store, tmp_path, job_id, script)
    os.killpg(int(job_id), signal.SIGKILL)  # like the OOM killer: the whole job, no trap
    assert _wait(lambda: not _live(job_id))  # zombies until PID 1 reaps them: ended
    got = jobs.refresh(store, [rec], lambda h: LocalTransport())[0]
    assert got.state == "failed" and got.exit_code is None


def test_a_reused_pid_is_not_the_job_and_cancel_never_signals_it(tmp_path, store):
    job_id, script = _start(tmp_path, 'echo "$?" "$HPC" >/dev/null; exit 0\n')
    assert _wait(lambda: not _live(job_id))  # ended (a zombie until PID 1 reaps it)
    (tmp_path / f"train.o{job_id}.exitcode").write_text(f"0 {script.name}\n")
    rec = _record(store, tmp_path, job_id, script)
    store.update("local", job_id, state="queued")  # the record never saw it run
    # another job's script now holds that session id: make the record point at it
    other_id, other_script = _start(tmp_path, "sleep 30\n", name="train-other.sh")
    store.update("local", job_id, state="queued")
    rec = store.get(job_id, "local")
    forged = msgspec.structs.replace(rec, job_id=other_id, exit_path=rec.exit_path)
    store.add(forged)
    result = jobs.cancel(store, store.get(other_id, "local"), LocalTransport(), sleep=lambda s: None)
    assert result.state == JobState.DONE and "had already ended" in result.message
    assert _alive(other_id), "cancel signalled a process that is not the job"
    os.killpg(int(other_id), signal.SIGKILL)


# A PID 1 that does not reap (containers, some VMs): orphans are its children and, once they
# exit, stay zombies. PR_SET_CHILD_SUBREAPER makes this small process that PID 1 for the job.
_NO_REAPER = """
import ctypes, subprocess, sys, time
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
print(subprocess.run(sys.argv[1:], capture_output=True, text=True, check=True).stdout.strip(), flush=True)
time.sleep(300)  # never waits for a child
"""


def _live(pgid: str) -> list:
    """The group's processes that still run (a zombie has ended; nothing reaped it)."""
    out = subprocess.run(["ps", "-o", "pid=,stat=", "-g", pgid], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if not line.split()[1].startswith("Z")]


def _state_of(pid: str) -> str:
    return subprocess.run(["ps", "-o", "stat=", "-p", pid], capture_output=True, text=True).stdout.strip()


def test_a_killed_script_nobody_reaps_leaves_its_job_running_and_cancel_ends_it(tmp_path, store):
    """Issue 33: under a PID 1 that never reaps, the killed script stays a zombie session leader;
    `status` called the job failed and `cancel` refused while its ranks ran on."""
    import sys

    (tmp_path / ".hpc-launch").mkdir()
    script = tmp_path / ".hpc-launch" / "train-z.sh"
    script.write_text("#!/bin/bash\nsleep 60 &\nsleep 60 &\nwait\n")
    Path(release_path(str(script))).write_text("")
    argv = NONE.submit_argv(str(script), log_prefix=str(tmp_path / "train.o"))
    reaper = subprocess.Popen([sys.executable, "-c", _NO_REAPER, *argv], stdout=subprocess.PIPE, text=True)
    try:
        job_id = NONE.parse_submit(reaper.stdout.readline())
        rec = _record(store, tmp_path, job_id, script)
        assert _wait(lambda: len(_live(job_id)) == 3)
        os.kill(int(job_id), signal.SIGKILL)
        assert _wait(lambda: _state_of(job_id).startswith("Z")), "the stand-in reaped the script"
        got = jobs.refresh(store, [rec], lambda h: LocalTransport())[0]
        assert got.state == "running" and "2 of its processes still run" in got.comment, got
        result = jobs.cancel(store, got, LocalTransport(), sleep=lambda s: time.sleep(0.2))
        assert result.state == JobState.CANCELLED, result
        assert _wait(lambda: not _live(job_id)), f"processes left: {_live(job_id)}"
    finally:
        reaper.kill()
        reaper.wait()


def test_cancel_ends_a_job_whose_processes_are_stopped_and_says_so(tmp_path, store):
    """Issue 33: SIGTERM waits while a process is stopped (SIGSTOP, Ctrl-Z): a cancel left all
    three processes of the job behind. It continues them after the signal, and says so."""
    job_id, script = _start(tmp_path, "sleep 60 &\nsleep 60 &\nwait\n")
    rec = _record(store, tmp_path, job_id, script)
    assert _wait(lambda: len(_live(job_id)) == 3)
    os.killpg(int(job_id), signal.SIGSTOP)
    assert _wait(lambda: all(_state_of(p).startswith("T") for p in _live(job_id)))
    result = jobs.cancel(store, rec, LocalTransport(), confirm_s=10, sleep=lambda s: time.sleep(0.2))
    assert result.state == JobState.CANCELLED, result
    assert "3 stopped processes" in result.message, result.message
    assert _wait(lambda: not _live(job_id)), f"processes left: {_live(job_id)}"
