"""A job's script ends at once when all that is left of its session is a zombie.

As it exits, the job script ends what its session left (templates/body/prologue.sh.j2). A zombie
there has already ended: its parent has yet to collect it, and where that parent is a PID 1 that
reaps late (containers) it stays for seconds. Before, the script took it for a live process: it
printed "ending the 1 process(es) of this job still running" and waited 2 s for it to go away at
the end of every such job. Here the test process stands in for that PID 1: a child subreaper
(prctl) that collects nothing until the job has ended.
"""

from __future__ import annotations

import ctypes
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from envutil import scheduler_env_cleared
from inproc import run_cli

PR_SET_CHILD_SUBREAPER = 36

# the rank leaves a child it never waits for: a zombie of the job's session once the rank exits
# (os.spawnv: no Popen object whose collection would reap it)
RANK = """\
import os, time
os.spawnv(os.P_NOWAIT, "/bin/true", ["true"])
time.sleep(0.3)
print("left a zombie", flush=True)
"""


@pytest.fixture
def late_reaper():
    """This process adopts the job's orphans (as PID 1 would) and reaps them only at the end."""
    libc = ctypes.CDLL(None, use_errno=True)
    # Linux >= 3.4, any user: a refusal is a broken machine, not a reason to prove nothing
    assert libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0, f"prctl: errno {ctypes.get_errno()}"
    known = _children()
    try:
        yield
    finally:
        libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
        adopted = _children() - known  # only these: never another test's Popen
        deadline = time.monotonic() + 10  # what still runs after that stays: it is reaped by nobody, harmlessly
        while adopted and time.monotonic() < deadline:
            for pid in list(adopted):
                try:
                    if os.waitpid(pid, os.WNOHANG) != (0, 0):
                        adopted.discard(pid)
                except ChildProcessError:
                    adopted.discard(pid)
            time.sleep(0.05)


def _children() -> set:
    me, found = str(os.getpid()), set()
    for d in Path("/proc").glob("[0-9]*"):
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        if stat.rsplit(")", 1)[1].split()[1] == me:
            found.add(int(d.name))
    return found


def _wait_for_child(pid: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while os.waitpid(pid, os.WNOHANG) == (0, 0):
        assert time.monotonic() < deadline, f"job script {pid} still runs after {timeout} s"
        time.sleep(0.05)


def test_a_zombie_left_in_the_session_does_not_hold_up_the_jobs_end(tmp_path, late_reaper):
    env = scheduler_env_cleared()
    env.update(HPC_LAUNCH_STATE_DIR=str(tmp_path / "state"), HPC_LAUNCH_CONFIG_DIR=str(tmp_path / "config"))
    (tmp_path / "rank.py").write_text(RANK)
    argv = ["submit", "--cluster", "local", "--script", "rank.py", "--gpus-per-node", "1"]
    r = run_cli(argv, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    job_id = r.stdout.strip()
    _wait_for_child(int(job_id), 120)  # the job script (pid = job id) was adopted by this process
    log = (tmp_path / f"train.o{job_id}").read_text()
    assert "left a zombie" in log, log[-2000:]
    assert "still running as it ends" not in log, log[-2000:]


def test_the_walltime_timer_just_killed_is_not_a_process_left_running(tmp_path):
    """As the script exits it sends the walltime timer SIGKILL, then looks for what its session
    left. On a loaded machine the timer can still read as running in that instant (CI saw "ending
    the 1 process(es) of this job still running" at the end of a job that left nothing): the look
    leaves the timer out, as it leaves out the script itself. The rendered function, run here in a
    session of its own beside a live stand-in timer and a live leftover."""
    env = scheduler_env_cleared()
    env.update(HPC_LAUNCH_STATE_DIR=str(tmp_path / "state"), HPC_LAUNCH_CONFIG_DIR=str(tmp_path / "config"))
    (tmp_path / "rank.py").write_text("pass\n")
    argv = ["submit", "--cluster", "local", "--script", "rank.py", "--gpus-per-node", "1", "--dry-run"]
    r = run_cli(argv, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    func = re.search(r"^hpc_launch_session\(\) \{.*?^\}$", r.stdout, re.M | re.S)
    assert func, r.stdout[:3000]
    probe = func.group(0) + (
        "\nsleep 30 & HPC_LAUNCH_WALLTIME_PID=$!\nsleep 30 & left=$!\nhpc_launch_session\n"
        'echo "timer=$HPC_LAUNCH_WALLTIME_PID left=$left found=$hpc_launch_left"\n'
        'kill "$HPC_LAUNCH_WALLTIME_PID" "$left"\n'
    )
    out = subprocess.run(["setsid", "bash", "-c", probe], capture_output=True, text=True, timeout=30).stdout
    fields = dict(kv.split("=", 1) for kv in out.split(" ", 2)[:2])
    found = out.split("found=", 1)[1].split()
    assert found == [fields["left"]], out  # the leftover, not the timer


# `hostname` for the job: the first call (the job's first line, a command with more substitutions
# after it) announces itself and sleeps, so the cancel's SIGTERM lands inside it
SLOW_HOSTNAME = """\
#!/bin/sh
if [ ! -e "$HPC_TEST_MARK" ]; then : > "$HPC_TEST_MARK"; sleep 30; fi
echo testhost
"""


def test_a_cancel_that_lands_in_a_command_substitution_is_a_cancel(tmp_path):
    """bash 5.2 runs the TERM trap in the middle of a command's first command substitution and then
    fails to parse the trap's action when the same command has another one ("trap: line 2:
    unexpected EOF while looking for matching `)'", exit 2): a local sweep's job cancelled early
    read as failed with exit code 2 (CI, twice). The job script has one substitution per command."""
    env = scheduler_env_cleared()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "hostname").write_text(SLOW_HOSTNAME)
    (bin_dir / "hostname").chmod(0o755)
    mark = tmp_path / "in-hostname"
    env.update(
        HPC_LAUNCH_STATE_DIR=str(tmp_path / "state"),
        HPC_LAUNCH_CONFIG_DIR=str(tmp_path / "config"),
        HPC_TEST_MARK=str(mark),
        PATH=f"{bin_dir}:{os.environ['PATH']}",
    )
    (tmp_path / "rank.py").write_text("pass\n")
    r = run_cli(["submit", "--cluster", "local", "--script", "rank.py", "-g", "1"], env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    job_id = r.stdout.strip()
    deadline = time.monotonic() + 60
    while not mark.exists():
        assert time.monotonic() < deadline, (tmp_path / f"train.o{job_id}").read_text()[-2000:]
        time.sleep(0.05)
    c = run_cli(["cancel", job_id], env=env, cwd=tmp_path)
    log = (tmp_path / f"train.o{job_id}").read_text()
    assert "unexpected EOF" not in log, log[-2000:]
    assert c.returncode == 0 and f"job {job_id} ended: cancelled" in c.stderr, (c.stderr, log[-2000:])


def _substitutions_per_command(line: str) -> list:
    """How many `$(...)` each simple command of one shell line has at its top level (nested ones
    run in the substitution's own shell; `$((` is arithmetic; single quotes are literal)."""
    counts, depth, quote, i = [0], 0, "", 0
    while i < len(line):
        c = line[i]
        if quote == "'":
            quote = "" if c == "'" else quote
        elif depth == 0 and c == "'" and quote != '"':
            quote = "'"
        elif c == '"' and depth == 0:
            quote = "" if quote == '"' else '"'
        elif line.startswith("$((", i):
            i += 2
        elif line.startswith("$(", i):
            counts[-1] += depth == 0
            depth += 1
            i += 1
        elif c == "(" and depth:
            depth += 1
        elif c == ")" and depth:
            depth -= 1
        elif depth == 0 and not quote and c in ";|&":
            counts.append(0)
        i += 1
    return counts


def test_no_command_of_a_rendered_job_script_has_two_substitutions():
    """The rule the test above proves for one line, over every golden job script."""
    golden = Path(__file__).parent / "golden" / "scripts"
    offending = []
    for path in sorted(golden.rglob("*.sh")):
        text = path.read_text().replace("\\\n", " ")
        for line in text.splitlines():
            if not line.lstrip().startswith("#") and max(_substitutions_per_command(line)) > 1:
                offending.append(f"{path.name}: {line.strip()[:120]}")
    assert offending == [], "\n".join(offending[:10])
