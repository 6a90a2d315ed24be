"""`--cluster pods` end to end on the testbed's pods: no scheduler, the job runs on pod1 (submitted
over ssh with --login pod1) and DeepSpeed's pdsh launcher fans out over ssh with host keys verified.

The profile is the shipped `pods` with the user's override a pods user writes (ssh options, venv):
the testbed's ssh config, key and known_hosts. Two real trainings (ZeRO-2 with --hosts, ZeRO-3
with the hosts gathered from an announcing pod); the failure cases start no training: a failing
rank, an unreachable pod, a pod that never announces, cancel of ranks sleeping on both pods.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from e2e_support import CLI, make_cli

pytestmark = [pytest.mark.pods, pytest.mark.scheduler]

TRAIN = "--model smallcnn --data synthetic --steps 3 --micro-batch 8 --log-every 1 --no-eval"
# A rank that says where it runs and what reached it, then fails, succeeds or sleeps.
RANKS_PY = """\
import os, socket, sys, time
rank = int(os.environ["RANK"])
print(f"rank {rank} on {socket.gethostname()} pid {os.getpid()} MY_VAR={os.environ.get('MY_VAR')!r} "
      f"VIRTUAL_ENV={os.environ.get('VIRTUAL_ENV')} PYTHONPATH={os.environ.get('PYTHONPATH')}", flush=True)
if "fail" in sys.argv:
    if rank == 1:
        sys.exit(7)
    time.sleep(1)
if "sleep" in sys.argv:
    time.sleep(600)
"""


@pytest.fixture
def pods(hpc_launch_bin, testbed, shared_workdir, tmp_path) -> CLI:
    """The hpc-launch CLI with a user override of `pods` for the testbed (as docs/sites/pods.md says)."""
    over = tmp_path / "clusters"
    over.mkdir()
    ssh = (
        f"-F {testbed['HPC_TESTBED_SSH_CONFIG']} -i {testbed['HPC_TESTBED_KEY']} -o IdentitiesOnly=yes "
        f"-o UserKnownHostsFile={testbed['HPC_TESTBED_KNOWN_HOSTS']} -o "
        "StrictHostKeyChecking=yes -o BatchMode=yes -o ConnectTimeout=5"
    )
    (over / "pods.yaml").write_text(
        "node: {gpus: 1, cpus: 2}\npython: {venv: auto}\nenv: {OMP_NUM_THREADS: '1'}\nnet_if: eth0\n"
        f"launch: {{launcher: deepspeed-pdsh, ssh_port: 22, pdsh_ssh_args: '{ssh}'}}\n"
    )
    cli = make_cli(hpc_launch_bin, testbed, shared_workdir)
    cli.env["HPC_LAUNCH_CLUSTERS_DIR"] = str(over)
    return cli


def _submit(cli: CLI, *args, follow=True, timeout=400):
    ext = os.environ.get("TORCH_EXTENSIONS_DIR")  # the suite's op cache: reaches the pods only with -e
    extra = ["-e", f"TORCH_EXTENSIONS_DIR={ext}"] if ext else []
    return cli(
        "submit",
        "--cluster",
        "pods",
        "--login",
        "pod1",
        "--workdir",
        str(cli.workdir),
        *extra,
        *args,
        *(["--follow", "--all"] if follow else []),
        timeout=timeout,
    )


def _log(cli: CLI, job_id: str) -> str:
    return (cli.workdir / f"train.o{job_id}").read_text(errors="replace")


def _job_id(r) -> str:
    return r.stdout.splitlines()[0].strip()


def test_two_pods_zero2_with_hosts_trains_on_both(pods):
    r = _submit(pods, "--hosts", "pod1,pod2", "-e", "MY_VAR=a b", "--train-args", f"{TRAIN} --zero 2")
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-2000:])
    log = _log(pods, _job_id(r))
    # every rank says where it runs: both pods, each by its own hostname
    assert re.search(r"\[hpc-train\] node pod1: rank 0 of 2", log), log[-3000:]
    assert re.search(r"\[hpc-train\] node pod2: rank 1 of 2", log), log[-3000:]
    assert re.search(r"step=3 .*world_size=2", log)
    assert "zero=2" in log
    env_file = next(pods.workdir.glob(".deepspeed_env_*")).read_text()
    assert "MY_VAR=a b\n" in env_file and "VIRTUAL_ENV=" in env_file and "PYTHONPATH=" in env_file
    assert "done with exit code 0" in r.stderr


def test_two_pods_zero3_with_gathered_hosts(pods, testbed):
    port = 29400 + os.getpid() % 500
    # pod2 announces itself before the job listens (workers often start first): it keeps trying
    worker = subprocess.Popen(
        [
            "ssh",
            "-F",
            testbed["HPC_TESTBED_SSH_CONFIG"],
            "pod2",
            pods.bin,
            "announce",
            f"10.200.0.11:{port}",
            "--timeout",
            "120",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        r = _submit(pods, "--hosts", "pod1,pod2", "--gather", str(port), "--train-args", f"{TRAIN} --zero 3")
    finally:
        out = worker.communicate(timeout=60)[0]
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-2000:], out)
    assert "announced pod2 at 10.200.0.12" in out
    log = _log(pods, _job_id(r))
    assert "[hpc-launch] gather: pod2 is at 10.200.0.12 (1/1)" in log
    assert re.search(r"^10\.200\.0\.11 slots=1\n10\.200\.0\.12 slots=1$", log, re.M), log[:3000]
    assert re.search(r"\[hpc-train\] node pod1: rank 0 of 2", log) and re.search(
        r"\[hpc-train\] node pod2: rank 1 of 2", log
    )
    assert "zero=3" in log and re.search(r"step=3 .*world_size=2", log)


def test_pod_that_never_announces_is_named(pods):
    t0 = time.monotonic()
    r = _submit(
        pods, "--hosts", "pod1,pod3", "--gather", str(29900 + os.getpid() % 90), "-e", "HPC_LAUNCH_GATHER_TIMEOUT=3"
    )
    assert r.returncode == 3, (r.stdout[-2000:], r.stderr[-2000:])
    assert re.search(
        r"\[hpc-launch\] error: pod3 did not announce within 3 s on port \d+ "
        r"\(reported: none\); run `hpc-launch announce 10\.200\.0\.11:\d+`",
        r.stdout,
    ), r.stdout[-2000:]
    assert time.monotonic() - t0 < 60


def test_failing_rank_on_second_pod_fails_the_job_and_env_reaches_it(pods, tmp_path):
    script = tmp_path / "ranks.py"
    script.write_text(RANKS_PY)
    r = _submit(pods, "--hosts", "pod1,pod2", "-e", "MY_VAR=x y", "--script", str(script), "--train-args", "fail")
    assert r.returncode == 7, (r.stdout[-3000:], r.stderr[-2000:])
    assert "failed, exit code 7" in r.stderr or "exit code 7" in r.stderr, r.stderr
    log = _log(pods, _job_id(r))
    # .deepspeed_env carried the --env value, the venv and PYTHONPATH to the rank on pod2
    line = re.search(r"^pod2: rank 1 on pod2 pid \d+ (.*)$", log, re.M)
    assert line, log[-3000:]
    assert "MY_VAR='x y'" in line.group(1)
    assert f"VIRTUAL_ENV={os.path.dirname(os.path.dirname(pods.bin))}" in line.group(1)
    assert f"PYTHONPATH={pods.workdir}" in line.group(1)
    assert re.search(r"pod2: ssh exited with exit code 7", log), log[-2000:]


def test_unreachable_pod_fails_fast_with_its_name(pods):
    t0 = time.monotonic()
    r = _submit(pods, "--hosts", "pod1,10.200.0.99", "--train-args", TRAIN)
    took = time.monotonic() - t0
    assert r.returncode == 3, (r.stdout[-2000:], r.stderr[-2000:])
    assert re.search(
        r"\[hpc-launch\] error: 10\.200\.0\.99 did not answer over "
        r"ssh from pod1 \(port 22\): .*(No route|timed out|refused)",
        r.stdout,
    ), r.stdout[-2000:]
    assert "deepspeed.launcher" not in r.stdout  # no rank was started
    assert took < 60, took


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return not Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] == "Z"


def _carrying(marker: str) -> list:
    """Processes (any pod: the testbed's pods share one PID namespace) whose environment holds marker."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if marker.encode() in (proc / "environ").read_bytes().split(b"\0"):
                    found.append(int(proc.name))
            except OSError:
                pass
    return [p for p in found if _alive(p)]


def test_cancel_leaves_no_rank_on_either_pod(pods, tmp_path):
    script = tmp_path / "ranks.py"
    script.write_text(RANKS_PY)
    r = _submit(pods, "--hosts", "pod1,pod2", "--script", str(script), "--train-args", "sleep", follow=False)
    assert r.returncode == 0, r.stderr
    job_id = _job_id(r)
    log = pods.wait_log(pods.workdir / f"train.o{job_id}", "pod2: rank 1 on pod2", timeout=120)
    log = pods.wait_log(pods.workdir / f"train.o{job_id}", "pod1: rank 0 on pod1", timeout=60)
    pids = [int(p) for p in re.findall(r"^pod\d: rank \d on pod\d pid (\d+)", log, re.M)]
    assert len(pids) == 2 and all(_alive(p) for p in pids)
    marker = f"HPC_LAUNCH_RANKS_OF={job_id}@10.200.0.11"
    assert len(_carrying(marker)) >= 4  # per pod: DeepSpeed's launcher and the rank
    c = pods("cancel", job_id, timeout=120)
    assert c.returncode == 0, (c.stdout, c.stderr)
    assert "cancelled" in (c.stdout + c.stderr)

    def session() -> str:  # the job's processes on pod1 (its session: script, launcher, pdsh, ssh)
        out = subprocess.run(["ps", "-o", "pid=,stat=", "--sid", job_id], capture_output=True, text=True).stdout
        return "".join(line for line in out.splitlines(True) if not line.split()[1].startswith("Z"))

    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and (any(_alive(p) for p in pids) or _carrying(marker) or session()):
        time.sleep(0.5)
    assert not [p for p in pids if _alive(p)], "a rank outlived cancel"
    assert not _carrying(marker), "a process of the job outlived cancel"
    assert "[hpc-launch] stopping the ranks on pod1,pod2" in _log(pods, job_id)
    assert session() == "", "the launcher outlived cancel on pod1"


def test_killed_pdsh_launcher_leaves_no_rank_on_either_pod(pods, tmp_path):
    """DeepSpeed's pdsh launcher on pod1 dies mid-job (SIGKILL: no handler of its own runs): the job
    script stops the ranks it started on every pod, and the job ends with the launcher's code."""
    script = tmp_path / "ranks.py"
    script.write_text(RANKS_PY)
    r = _submit(pods, "--hosts", "pod1,pod2", "--script", str(script), "--train-args", "sleep", follow=False)
    assert r.returncode == 0, r.stderr
    job_id = _job_id(r)
    log_path = pods.workdir / f"train.o{job_id}"
    pods.wait_log(log_path, "pod2: rank 1 on pod2", timeout=120)
    log = pods.wait_log(log_path, "pod1: rank 0 on pod1", timeout=60)
    pids = [int(p) for p in re.findall(r"^pod\d: rank \d on pod\d pid (\d+)", log, re.M)]
    assert len(pids) == 2 and all(_alive(p) for p in pids)
    marker = f"HPC_LAUNCH_RANKS_OF={job_id}@10.200.0.11"
    out = subprocess.run(["ps", "-ww", "-o", "pid=,args=", "--sid", job_id], capture_output=True, text=True).stdout
    launcher = [int(line.split()[0]) for line in out.splitlines() if "--launcher pdsh" in line]
    if len(launcher) != 1:
        pods("cancel", job_id, timeout=120)
    assert len(launcher) == 1, out
    os.kill(launcher[0], 9)

    exitcode = pods.workdir / f"train.o{job_id}.exitcode"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (any(_alive(p) for p in pids) or _carrying(marker) or not exitcode.exists()):
        time.sleep(0.5)
    assert not [p for p in pids if _alive(p)], "a rank outlived its killed launcher"
    assert not _carrying(marker), "a process of the job outlived its killed launcher"
    assert "[hpc-launch] the launcher ended with exit code 137: stopping the ranks on pod1,pod2" in _log(pods, job_id)
    assert exitcode.read_text().split()[0] == "137"
