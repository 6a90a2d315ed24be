"""Faults a demanding user causes (issue 8): no job lost, duplicated or misreported.

Real processes throughout: the `local` cluster starts real jobs (a short Python script stands
in for training), the job store is the real sqlite file, signals are real signals.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import hpc_launch
from envutil import scheduler_env_cleared
from inproc import run_cli


@pytest.fixture
def sandbox(tmp_path):
    env = scheduler_env_cleared()
    env.update(HPC_LAUNCH_STATE_DIR=str(tmp_path / "state"), HPC_LAUNCH_CONFIG_DIR=str(tmp_path / "config"))
    work = tmp_path / "work"
    work.mkdir()
    (work / "quick.py").write_text("import time\nprint('ran', flush=True)\ntime.sleep(1)\n")
    (work / "slow.py").write_text("import time\nprint('ran', flush=True)\ntime.sleep(30)\n")
    return work, env, tmp_path / "state" / "jobs.sqlite"


def _records(db: Path):
    return _rows(db, "job_id, state")


def _rows(db: Path, columns: str):
    if not db.exists():
        return []
    con = sqlite3.connect(str(db))
    try:
        return con.execute(f"SELECT {columns} FROM jobs").fetchall()
    except sqlite3.OperationalError:  # interrupted while the store was first being created: no table yet
        return []
    finally:
        con.close()


def _script_runs(work: Path):
    """Job logs the launcher created: one per job that really started."""
    return sorted(p for p in work.glob("train.o*") if not p.name.endswith((".exitcode", ".live")))


def _processes_in(work: Path) -> list:
    """(pid, args) of every live process whose working directory is `work`: a job's script,
    launcher and ranks all run there (a zombie has no working directory: it is not counted)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.readlink(entry / "cwd") != str(work):
                continue
            args = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        found.append((int(entry.name), args))
    return found


def _wait_until(condition, timeout: float, step: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(step)
    return condition()


def assert_nothing_lost(hpc_launch_bin: str, work: Path, env: dict, db: Path) -> None:
    """After every fault: 0 jobs lost (every job that started has a record), 0 duplicated (one
    record per id, one start per record), and, once every recorded job is cancelled, 0 processes
    left. A launcher still deciding whether to start is waited for first (a few seconds)."""
    _wait_until(lambda: not any("hpc-launch-job" in args for _, args in _processes_in(work)), 10)
    ids = [job_id for job_id, _ in _records(db)]
    started = {p.name[len("train.o") :] for p in _script_runs(work)}
    assert len(ids) == len(set(ids)), f"duplicated records: {ids}"
    assert started <= set(ids), f"lost: job(s) {sorted(started - set(ids))} started with no record"
    for job_id in ids:
        run_cli(["cancel", job_id], env=env, cwd=work)  # in-process (tests/inproc.py): the fault was the process's
    assert _wait_until(lambda: not _processes_in(work), 15), f"processes left: {_processes_in(work)}"


@pytest.mark.train  # twenty real local jobs: DeepSpeed's launcher (and torch) starts twenty times on two cores
def test_twenty_concurrent_submissions_and_status_calls(hpc_launch_bin, sandbox):
    work, env, db = sandbox
    submit = [hpc_launch_bin, "submit", "--cluster", "local", "--script", "quick.py", "--gpus-per-node", "1"]

    def run(argv):
        return subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=120)

    with ThreadPoolExecutor(max_workers=20) as pool:
        results = list(pool.map(run, [submit] * 20))
    for r in results:
        assert r.returncode == 0, r.stderr
        assert "locked" not in r.stderr
    ids = [r.stdout.strip() for r in results]
    assert len(set(ids)) == 20
    recorded = dict(_records(db))
    assert set(recorded) == set(ids)  # none lost, none twice
    with ThreadPoolExecutor(max_workers=20) as pool:
        statuses = list(pool.map(run, [[hpc_launch_bin, "status", "--json"]] * 10 + [[hpc_launch_bin, "list"]] * 10))
    for r in statuses:
        assert r.returncode == 0, r.stderr
        assert "locked" not in r.stderr
    assert len(_records(db)) == 20


def _frames_after_handler(err: str) -> list:
    """Frames of our code in a traceback, except the package's first lines, which run before its
    SIGINT handler is installed (the interpreter delivers Ctrl-C between any two bytecodes)."""
    init = Path(hpc_launch.__file__)
    installed = next(n for n, line in enumerate(init.read_text().splitlines(), 1) if "HANDLER-INSTALLED" in line)
    frames = re.findall(r'File "([^"]*hpc_launch/[^"]*)", line (\d+)', err)
    return [(f, n) for f, n in frames if not (f.endswith("hpc_launch/__init__.py") and int(n) <= installed)]


# Ctrl-C's handler run inside a weakref callback, as when the signal lands while an import releases
# its module lock (importlib's _get_module_lock cb): Python ignores an exception raised there
PY_IGNORES_IT = """
import signal, sys, weakref
sys.argv[0] = "hpc-launch"
import hpc_launch
{handler}
class Lock: pass
lock = Lock()
ref = weakref.ref(lock, lambda _: handler(signal.SIGINT, None))
del lock
print("the command went on")
"""


@pytest.mark.parametrize(
    "handler",
    [
        "handler = signal.getsignal(signal.SIGINT)",  # the package's, from its first statement
        "from hpc_launch.cli import _interrupted_while_starting as handler",  # the command's, until main()
    ],
)
def test_ctrl_c_while_starting_ends_the_command_even_where_python_ignores_exceptions(handler):
    """Before, the handlers raised SystemExit(130): in such a callback it was printed as "Exception
    ignored" and the command went on (a submit Ctrl-C'ed 0.05 s in ran and followed its job)."""
    r = subprocess.run(
        [sys.executable, "-c", PY_IGNORES_IT.format(handler=handler)], capture_output=True, text=True, timeout=60
    )
    assert (r.returncode, r.stdout, r.stderr) == (130, "", "")


@pytest.mark.parametrize("delay", [0.05, 0.15, 0.3, 0.45, 0.6, 0.8, 1.2, 2.0])
def test_ctrl_c_at_any_moment_of_submit_follow_never_loses_the_job(hpc_launch_bin, sandbox, delay):
    """SIGINT lands before, during or after the submission: either nothing ran and nothing was
    left behind, or the job runs on and is recorded."""
    work, env, db = sandbox
    proc = subprocess.Popen(
        [hpc_launch_bin, "submit", "--cluster", "local", "--script", "slow.py", "--gpus-per-node", "1", "--follow"],
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    # Ctrl-C while the interpreter itself starts (CPython's "Fatal Python error", or the console
    # script's own `import re`) comes before any of our code; from the package's handler on, none
    assert "Traceback" not in err or not _frames_after_handler(err), err
    assert_nothing_lost(hpc_launch_bin, work, env, db)
    started = _script_runs(work)
    recorded = _records(db)
    if not started:
        assert recorded == [], (out, err)
        assert not list((work / ".hpc-launch").glob("*.sh")), (
            "a script was left behind by a submission that did not happen"
        )
        return
    assert len(started) == 1 and len(recorded) == 1, (out, err, started, recorded)
    job_id = recorded[0][0]
    assert started[0].name == f"train.o{job_id}"
    assert job_id in out  # the id was printed
    if proc.returncode == 130 and "keeps running" in err:
        assert f"hpc-launch logs -f {job_id}" in err


@pytest.fixture(scope="module")
def submit_seconds(tmp_path_factory) -> float:
    """How long one whole `submit --cluster local` takes on this machine (its job cancelled)."""
    base = tmp_path_factory.mktemp("timing")
    env = scheduler_env_cleared()
    env.update(HPC_LAUNCH_STATE_DIR=str(base / "state"), HPC_LAUNCH_CONFIG_DIR=str(base / "config"))
    (base / "slow.py").write_text("import time\ntime.sleep(30)\n")
    argv = [str(Path(__import__("sys").executable).parent / "hpc-launch"), "submit", "--cluster", "local"]
    began = time.monotonic()
    r = subprocess.run(argv + ["--script", "slow.py"], cwd=base, env=env, capture_output=True, text=True, timeout=60)
    took = time.monotonic() - began
    assert r.returncode == 0, r.stderr
    subprocess.run(argv[:1] + ["cancel", r.stdout.strip()], cwd=base, env=env, capture_output=True, timeout=60)
    return took


def _store_held(db: Path) -> sqlite3.Connection:
    """The job store's write lock, taken as another hpc-launch process writing it would."""
    con = sqlite3.connect(str(db), isolation_level=None, timeout=30)
    con.execute("BEGIN IMMEDIATE")
    return con


@pytest.mark.parametrize(
    "moment",
    # a fraction of a whole submit's time; "busy+S": S s after the job's files are written while
    # another process holds the store (the record waits: the moment between start and record, widened)
    [0.2, 0.4, 0.55, 0.65, 0.75, 0.85, 0.95, 1.2, "busy+0.0", "busy+0.3", "busy+1.0"],
)
def test_kill_9_of_submit_at_any_moment_never_leaves_a_job_unrecorded(hpc_launch_bin, sandbox, submit_seconds, moment):
    """`kill -9` cannot be held off: whenever it lands, a job that starts has its record first
    (issue 33: 0.35 s into a submit, a job ran on with no record and no message)."""
    work, env, db = sandbox
    proc = subprocess.Popen(
        [hpc_launch_bin, "submit", "--cluster", "local", "--script", "slow.py", "--gpus-per-node", "1"],
        cwd=work,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    held = None
    if isinstance(moment, str):
        scripts = work / ".hpc-launch"
        assert _wait_until(lambda: any(scripts.glob("*.sh")), 30, 0.001), "the submit wrote no script"
        held = _store_held(db)
        time.sleep(float(moment.split("+")[1]))
    else:
        time.sleep(moment * submit_seconds)
    proc.kill()
    proc.wait(timeout=30)
    if held is not None:
        held.execute("ROLLBACK")
        held.close()
    assert_nothing_lost(hpc_launch_bin, work, env, db)


@pytest.mark.parametrize("after", [False, True])
def test_ctrl_c_says_whether_the_job_was_submitted(sandbox, monkeypatch, capsys, after):
    """The one line after Ctrl-C: before the submission, that nothing was submitted; after it,
    the job's id, that it keeps running, and how to follow and stop it."""
    from types import SimpleNamespace

    from hpc_launch import cli, jobs

    work, env, _ = sandbox
    for key in ("HPC_LAUNCH_STATE_DIR", "HPC_LAUNCH_CONFIG_DIR"):
        monkeypatch.setenv(key, env[key])
    monkeypatch.chdir(work)

    def interrupted(prepared, on_recorded=None, **_):
        if after:
            on_recorded(SimpleNamespace(job_id="4242", name="train", cluster="local", log_path="train.o4242", extra={}))
        raise KeyboardInterrupt

    monkeypatch.setattr(jobs, "submit", interrupted)
    with pytest.raises(SystemExit) as exit_:
        cli.main(["submit", "--cluster", "local", "--script", "quick.py", "--gpus-per-node", "1"])
    out, err = capsys.readouterr()
    assert exit_.value.code == 130, err
    said = err.strip().splitlines()[-1]
    if after:
        assert out == "4242\n"
        assert "after job 4242 was submitted and recorded: it keeps running" in said
        assert "hpc-launch logs -f 4242" in said and "hpc-launch cancel 4242" in said
    else:
        assert out == "" and "nothing was submitted or recorded" in said and "4242" not in err


def test_an_unwritable_job_store_refuses_before_submitting(hpc_launch_bin, sandbox):
    work, env, db = sandbox
    db.parent.mkdir(parents=True)
    db.write_bytes(b"not a database" * 64)
    r = run_cli(["submit", "--cluster", "local", "--script", "quick.py"], env=env, cwd=work)
    assert r.returncode != 0 and "job store" in r.stderr
    time.sleep(0.5)
    assert _script_runs(work) == []  # nothing was submitted


def test_job_list_json_has_the_documented_keys(hpc_launch_bin, sandbox):
    work, env, db = sandbox
    r = run_cli(["submit", "--cluster", "local", "--script", "quick.py", "--gpus-per-node", "1"], env=env, cwd=work)
    assert r.returncode == 0, r.stderr
    out = run_cli(["list", "--json"], env=env, cwd=work)
    rows = json.loads(out.stdout)
    assert rows[0]["job_id"] == r.stdout.strip()
    assert set(rows[0]) >= {
        "job_id",
        "cluster",
        "name",
        "state",
        "exit_code",
        "submit_time",
        "end_time",
        "host",
        "workdir",
        "log_path",
        "comment",
    }


@pytest.mark.train
def test_kill_9_of_one_rank_fails_the_job_and_is_not_a_cancel(hpc_launch_bin, sandbox):
    """Real DeepSpeed on 2 CPU ranks; one rank is SIGKILLed (what the OOM killer does)."""
    work, env, db = sandbox
    r = subprocess.run(
        [
            hpc_launch_bin,
            "submit",
            "--cluster",
            "local",
            "--train-args",
            "--model smallcnn --data synthetic --steps 100000 --micro-batch 8 --log-every 10 --no-eval",
        ],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    job_id = r.stdout.strip()
    log = work / f"train.o{job_id}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and "[hpc-train] step=20 " not in (log.read_text() if log.exists() else ""):
        time.sleep(0.5)
    ranks = subprocess.run(["pgrep", "-s", job_id, "-f", "local_rank=1"], capture_output=True, text=True).stdout.split()
    assert ranks, "rank 1 not found"
    os.kill(int(ranks[0]), signal.SIGKILL)
    state = None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        out = subprocess.run(
            [hpc_launch_bin, "status", "--json", job_id], cwd=work, env=env, capture_output=True, text=True
        )
        state = json.loads(out.stdout)[0]
        if state["state"] not in ("queued", "running"):
            break
        time.sleep(1)
    assert state["state"] == "failed", state
    assert state["exit_code"] not in (0, None)
    deadline = time.monotonic() + 30  # the script itself exits right after writing its exit code
    while time.monotonic() < deadline and subprocess.run(["pgrep", "-s", job_id], capture_output=True).returncode == 0:
        time.sleep(0.5)
    assert subprocess.run(["pgrep", "-s", job_id], capture_output=True).returncode != 0, "processes of the job are left"


def _three_locals(work: Path, env: dict) -> dict:
    profiles = work.parent / "profiles"
    profiles.mkdir(exist_ok=True)
    for name in ("local-b", "local-c"):
        (profiles / f"{name}.yaml").write_text(f"name: {name}\nextends: local\n")
    return dict(env, HPC_LAUNCH_CLUSTERS_DIR=str(profiles))


WHERE_SUBMIT = ["where", "-c", "local,local-b,local-c", "--submit", "--script", "slow.py"]


@pytest.fixture(scope="module")
def where_submit_seconds(tmp_path_factory) -> float:
    """How long `where --submit` to three local clusters takes here until it returns (--no-wait)."""
    base = tmp_path_factory.mktemp("where-timing")
    work = base / "work"
    work.mkdir()
    (work / "slow.py").write_text("import time\ntime.sleep(30)\n")
    env = scheduler_env_cleared()
    env.update(HPC_LAUNCH_STATE_DIR=str(base / "state"), HPC_LAUNCH_CONFIG_DIR=str(base / "config"))
    env = _three_locals(work, env)
    bin_ = str(Path(__import__("sys").executable).parent / "hpc-launch")
    began = time.monotonic()
    r = subprocess.run(
        [bin_, *WHERE_SUBMIT, "--no-wait"], cwd=work, env=env, capture_output=True, text=True, timeout=60
    )
    took = time.monotonic() - began
    assert r.returncode == 0, r.stderr
    subprocess.run([bin_, "cancel", r.stdout.strip()], cwd=work, env=env, capture_output=True, timeout=60)
    return took


@pytest.mark.parametrize("fraction", [0.2, 0.35, 0.5, 0.6, 0.7, 0.8, 0.9, 1.5])
def test_ctrl_c_of_where_submit_names_every_job_and_submits_no_more(
    hpc_launch_bin, sandbox, where_submit_seconds, fraction
):
    """Issue 33: a terminal's Ctrl-C (SIGINT to the whole foreground group, the submit commands
    too) while `where --submit` submits to three clusters: every job submitted is named, nothing
    more is submitted, no "bash refused the job", no job's script deleted under it."""
    work, env, db = sandbox
    env = _three_locals(work, env)
    proc = subprocess.Popen(
        [hpc_launch_bin, *WHERE_SUBMIT],
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    time.sleep(fraction * where_submit_seconds)
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    said = out + err
    assert "refused the job" not in said, said
    assert "Traceback" not in err or not _frames_after_handler(err), err
    rows = _rows(db, "job_id, cluster, script_path")
    for job_id, cluster, script in rows:
        assert f"{cluster}: job {job_id}" in said or f"{cluster} job {job_id}" in said, (job_id, said)
        assert Path(script).exists(), f"the script of recorded job {job_id} was deleted"
    if rows:
        assert re.search(r"first-\d{8}-\d{6}-[0-9a-f]{4}", out), said  # the group's id, for status and cancel
    assert_nothing_lost(hpc_launch_bin, work, env, db)
