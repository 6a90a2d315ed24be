"""Submit over SSH: the job's files and its submit command, the SFTP path against the files on the
submit command's stdin (hpc_launch/transport/send_files.py), on the testbed's login node.

    testbed/up.sh && . testbed/env.sh
    python bench/bench_ssh_submit.py               # ~3 min on 2 cores
    python bench/bench_ssh_submit.py --pairs 15 --login hpc-login

Each trial opens a new connection (as a new `hpc-launch submit` process does), resolves the work
dir (SFTP, both paths), then places a real job's files (its capsule, the script, the 0600 secrets
file: what `submit --cluster local --pass-env TOKEN` writes) and runs the command:
  sftp:  put_text for each file, put_private for the secrets, then the command (the old path);
  stdin: run_with_files, one exec channel (the new path).
The command is `true` through the same login shell: the scheduler's own time is not hpc-launch's.
Pairs alternate their order; medians. Measured per trial: wall time, the client's CPU time (this
process, paramiko's thread included), and round trips: the client's waits for a server reply
(channel opens, exec/subsystem requests, the SFTP version and every SFTP reply, each command's
result), counted from paramiko itself. On a laptop each round trip costs the link's RTT; the
testbed's login is on loopback (RTT ~0.05 ms), so the printed "at RTT" lines add rtts x RTT.

hpc-launch's own share of a submit over SSH (what it costs the submitting machine, whatever the
link): the client's CPU for start-up and render (`submit --dry-run`, a fresh process), paramiko's
import (before: plain `import paramiko`; now: without invoke, transport/paramiko_lite.py),
connecting, and the files and command above. CPU time, not wall time: on a loaded machine wall
time measures the queue for the cores.

Last, whole `hpc-launch submit --pass-env` processes, old and new interleaved, to a profile whose
qsub is a stand-in on the login node that prints a job id (so no job is queued): the old path is
the same tree with SSHTransport.run_with_files removed (FilesAhead then writes through SFTP) and
paramiko imported with invoke. Their CPU time is hpc-launch's own share; target < 0.3 s.

Prints figures and PASS/FAIL; it never fails on speed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OWN_SHARE_TARGET_S = 0.3  # issue 18
sys.path.insert(0, str(REPO))


def job_files(login: str, workdir: str):
    """The files `submit --cluster local --pass-env BENCH_TOKEN` writes, as submission.py queues them."""
    from hpc_launch import secrets
    from hpc_launch.jobs.submission import queue, write_capsule
    from hpc_launch.prepare import prepare
    from hpc_launch.spec import JobSpec
    from hpc_launch.transport.send_files import FilesAhead

    os.environ["BENCH_TOKEN"] = "not-a-real-token"
    prepared = prepare(JobSpec(cluster="local", login=login, workdir=workdir, pass_env=["BENCH_TOKEN"]))
    ahead = FilesAhead(_NoTransport())  # queues only; nothing runs
    written: list = []
    write_capsule(ahead, prepared, workdir, written)
    script_path = f"{workdir}/{prepared.script.script_relpath}"
    queue(ahead, script_path, prepared.script.text.encode(), 0o755, written)
    secret = secrets.encode(secrets.collect(["BENCH_TOKEN"]))
    queue(ahead, secrets.path_for(script_path), secret, 0o600, written, private=True)
    return ahead.queued


class _NoTransport:
    host = "bench"


class RoundTrips:
    """Counts the client's waits for a server reply, by wrapping paramiko's blocking calls."""

    def __init__(self):
        import paramiko
        from paramiko import sftp_client

        from hpc_launch.transport import ssh

        self.n = 0
        me = self

        def counted(owner, name, extra=0):
            real = getattr(owner, name)

            def wrapper(*a, **k):
                me.n += 1 + extra
                return real(*a, **k)

            setattr(owner, name, wrapper)

        counted(paramiko.Transport, "open_session")
        counted(paramiko.Channel, "exec_command")
        counted(paramiko.Channel, "invoke_subsystem")
        counted(sftp_client.SFTPClient, "_read_response")
        counted(sftp_client.SFTPClient, "_send_version")
        real_exchange = ssh.SSHTransport._exchange

        def exchange(self_, *a, **k):  # the command's result: one more reply awaited
            me.n += 1
            return real_exchange(self_, *a, **k)

        ssh.SSHTransport._exchange = exchange


def trial(path: str, login: str, ssh_config: str, files, rtts: RoundTrips, workdir: str):
    from hpc_launch.transport import SSHTransport
    from hpc_launch.transport.send_files import run_with_files

    c_start = time.process_time()
    t = SSHTransport(login, ssh_config=ssh_config)
    t._transport()  # connected (key exchange, host key, authentication): the same on both paths
    t0, c0, n0 = time.perf_counter(), time.process_time(), rtts.n
    connect_cpu = c0 - c_start
    t.resolve_path(workdir)  # both: the work dir's home (SFTP)
    if path == "sftp":
        for f in files:
            if f.private:
                t.put_private(f.path, f.data)
            else:
                t.put_text(f.path, f.data.decode(), mode=f.mode)
        r = t.run(["true"], cwd=workdir)
    else:
        r = run_with_files(t, files, ["true"], cwd=workdir)
    wall, cpu, n = time.perf_counter() - t0, time.process_time() - c0, rtts.n - n0
    assert r.rc == 0, r
    t.run(["rm", "-rf", "--", workdir])
    t.close()
    return wall, cpu, n, connect_cpu


def subprocess_cost(argv, env):
    """(wall s, CPU s) of a child process."""
    before = os.times()
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return time.perf_counter() - t0, cpu


PROFILE = """name: bench-ssh
extends: abci
title: bench_ssh_submit.py (qsub is a stand-in that prints a job id)
login: {login}
commands: {{qsub: {qsub}}}
group: {{required: false}}
"""


def one_submit(path: str, argv) -> None:
    """In a fresh process: one whole `hpc-launch submit`, the old way (SFTP writes, paramiko with
    invoke) or the new one."""
    if path == "sftp":
        import paramiko  # noqa: F401  (as before: invoke and all)

        from hpc_launch.transport import ssh

        del ssh.SSHTransport.run_with_files  # FilesAhead falls back to put_text / put_private: SFTP
    from hpc_launch.cli import main as cli_main

    cli_main(list(argv))


def whole_submits(args, base: str, pairs: int) -> dict:
    """CPU and wall of whole `hpc-launch submit` processes over SSH, old and new interleaved."""
    from hpc_launch.transport import SSHTransport

    qsub = f"{base}/fake-qsub"
    t = SSHTransport(args.login, ssh_config=args.ssh_config)
    made = t.run(
        [
            "sh",
            "-c",
            'mkdir -p "$1" && printf "#!/bin/sh\\necho \\$\\$.bench\\n" > "$2" && chmod +x "$2"',
            "sh",
            base,
            qsub,
        ]
    )
    assert made.rc == 0, made
    config = Path(os.environ["HPC_LAUNCH_CONFIG_DIR"])
    (config / "clusters").mkdir(parents=True, exist_ok=True)
    (config / "clusters" / "bench-ssh.yaml").write_text(PROFILE.format(login=args.login, qsub=qsub))
    os.environ["BENCH_TOKEN"] = "not-a-real-token"
    got: dict = {"sftp": [], "stdin": []}
    for i in range(pairs):
        for path in ("sftp", "stdin") if i % 2 == 0 else ("stdin", "sftp"):
            argv = ["submit", "--cluster", "bench-ssh", "--workdir", f"{base}/w{i}{path}", "--pass-env", "BENCH_TOKEN"]
            got[path].append(subprocess_cost([sys.executable, __file__, "--one", path, *argv], dict(os.environ)))
    t.close()
    return got


def cleanup(args, base: str, state: Path) -> None:
    from hpc_launch.transport import SSHTransport

    t = SSHTransport(args.login, ssh_config=args.ssh_config)
    t.run(["rm", "-rf", "--", base])
    t.close()
    shutil.rmtree(state, ignore_errors=True)


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--one":
        one_submit(sys.argv[2], sys.argv[3:])
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=9)
    ap.add_argument("--login", default=os.environ.get("HPC_TESTBED_LOGIN_HOST", "hpc-login"))
    ap.add_argument("--ssh-config", default=os.environ.get("HPC_TESTBED_SSH_CONFIG"))
    args = ap.parse_args()
    if not args.ssh_config:
        raise SystemExit("no ssh config: `. testbed/env.sh` first (or pass --ssh-config)")
    os.environ["HPC_LAUNCH_SSH_CONFIG"] = args.ssh_config
    state = Path(tempfile.mkdtemp(prefix="bench-ssh-submit-"))
    os.environ.setdefault("HPC_LAUNCH_STATE_DIR", str(state / "state"))
    os.environ.setdefault("HPC_LAUNCH_CONFIG_DIR", str(state / "config"))
    base = f"/tmp/bench-ssh-submit-{uuid.uuid4().hex[:8]}"
    try:
        files = job_files(args.login, f"{base}/run")
        rtts = RoundTrips()
        print(f"nproc {os.cpu_count()}, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print(f"{len(files)} files, {sum(len(f.data) for f in files)} bytes; login {args.login}; {args.pairs} pairs")
        got: dict = {"sftp": [], "stdin": []}
        for i in range(args.pairs):
            order = ("sftp", "stdin") if i % 2 == 0 else ("stdin", "sftp")
            for path in order:
                workdir = f"{base}/run"
                got[path].append(trial(path, args.login, args.ssh_config, files, rtts, workdir))
        print(f"load average after {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        med = {p: [statistics.median(x[k] for x in got[p]) for k in range(4)] for p in got}
        print("files and command, after connecting (connecting's own CPU apart):")
        print(f"{'path':6} {'wall s':>8} {'client CPU s':>13} {'round trips':>12} {'connect CPU s':>14}")
        for p in ("sftp", "stdin"):
            w, c, n, cc = med[p]
            print(f"{p:6} {w:8.3f} {c:13.3f} {n:12.0f} {cc:14.3f}")
        print(
            f"ratio stdin/sftp: wall {med['stdin'][0] / med['sftp'][0]:.2f}, CPU {med['stdin'][1] / med['sftp'][1]:.2f}"
        )
        for rtt_ms in (20, 50, 100):
            old = med["sftp"][0] + med["sftp"][2] * rtt_ms / 1000
            new = med["stdin"][0] + med["stdin"][2] * rtt_ms / 1000
            print(f"at RTT {rtt_ms} ms (modelled: + round trips x RTT): sftp {old:.2f} s, stdin {new:.2f} s")
        # the rest of hpc-launch's own share, for the record: start-up and render, paramiko's import
        env = {**os.environ}
        exe = shutil.which("hpc-launch", path=str(Path(sys.executable).parent)) or "hpc-launch"
        dry = [exe, "submit", "--cluster", "local", "--login", args.login, "--workdir", "x", "--dry-run"]
        lite = "from hpc_launch.transport import paramiko_lite; paramiko_lite.load()"
        lite_base = "from hpc_launch.transport import paramiko_lite"  # what the dry-run imported already
        runs: dict = {"dry": [], "paramiko": [], "lite": [], "python": [], "lite_base": []}
        for _ in range(7):
            runs["dry"].append(subprocess_cost(dry, env))
            runs["paramiko"].append(subprocess_cost([sys.executable, "-c", "import paramiko"], env))
            runs["lite"].append(subprocess_cost([sys.executable, "-c", lite], env))
            runs["python"].append(subprocess_cost([sys.executable, "-c", "pass"], env))
            runs["lite_base"].append(subprocess_cost([sys.executable, "-c", lite_base], env))
        m = {k: [statistics.median(x[i] for x in v) for i in range(2)] for k, v in runs.items()}
        print(f"submit --dry-run (start-up, profile, render): {m['dry'][0]:.3f} s wall, {m['dry'][1]:.3f} CPU-s")
        base_of = {"paramiko": "python", "lite": "lite_base"}
        for k, what in (("paramiko", "import paramiko (before)"), ("lite", "paramiko_lite.load() (now, no invoke)")):
            extra = [m[k][i] - m[base_of[k]][i] for i in range(2)]
            print(f"{what}: {extra[0]:.3f} s wall, {extra[1]:.3f} CPU-s")
        print("medians of 7")
        own = {
            p: m["dry"][1] + m[k][1] - m[base_of[k]][1] + med[p][3] + med[p][1]
            for p, k in (("sftp", "paramiko"), ("stdin", "lite"))
        }
        for p, when in (("sftp", "before"), ("stdin", "now")):
            print(f"sum of those parts, {when} (dry-run + paramiko + connect + files/command): {own[p]:.3f} CPU-s")
        print(f"ratio now/before: {own['stdin'] / own['sftp']:.2f}")
        whole = whole_submits(args, base, args.pairs)
        wm = {p: [statistics.median(x[i] for x in whole[p]) for i in range(2)] for p in whole}
        print(
            "whole `hpc-launch submit --cluster bench-ssh --pass-env BENCH_TOKEN` processes over SSH (a stand-in qsub):"
        )
        for p, when in (("sftp", "before"), ("stdin", "now")):
            print(f"  {when:6} ({p}): {wm[p][0]:.3f} s wall, {wm[p][1]:.3f} CPU-s (hpc-launch's own share)")
        print(
            f"  ratio now/before: wall {wm['stdin'][0] / wm['sftp'][0]:.2f}, CPU {wm['stdin'][1] / wm['sftp'][1]:.2f}"
        )
        verdict = "PASS" if wm["stdin"][1] < OWN_SHARE_TARGET_S else "FAIL"
        print(f"hpc-launch's own share of a submit over SSH < {OWN_SHARE_TARGET_S} s: {verdict} ({wm['stdin'][1]:.3f})")
        print(f"load average at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    finally:
        cleanup(args, base, state)


if __name__ == "__main__":
    main()
