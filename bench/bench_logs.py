"""How quickly `follow` shows a new log line, and what following an idle job costs.

    python bench/bench_logs.py            # quick (< 60 s): local and over a loopback sshd
    python bench/bench_logs.py --lines 500 --idle 30

Targets: p99 latency from a line written to it shown < 0.5 s; idle follower CPU < 2% of a core.
"""

from __future__ import annotations

import argparse
import random
import resource
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from hpc_launch.logs import follow  # noqa: E402
from hpc_launch.states import JobState  # noqa: E402
from hpc_launch.transport import LocalTransport, SSHTransport  # noqa: E402

LATENCY_TARGET_S = 0.5
CPU_TARGET = 0.02


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)  # all threads: paramiko's reader included
    return usage.ru_utime + usage.ru_stime


def measure_latency(transport, path: Path, lines: int) -> list:
    latencies = []
    done = threading.Event()
    buffer = [""]

    def write(text: str) -> None:
        seen = time.time()
        buffer[0] += text
        *complete, buffer[0] = buffer[0].split("\n")
        latencies.extend(seen - float(line) for line in complete)

    def writer() -> None:
        with open(path, "a") as fh:
            for _ in range(lines):
                time.sleep(random.uniform(0.0, 0.05))
                fh.write(f"{time.time():.6f}\n")
                fh.flush()
        done.set()

    path.touch()
    threading.Thread(target=writer, daemon=True).start()
    follow(transport, str(path), state=lambda: JobState.DONE if done.is_set() else JobState.RUNNING, write=write)
    return sorted(latencies)


def measure_idle_cpu(transport, path: Path, seconds: float) -> float:
    path.touch()
    stop = threading.Event()
    threading.Timer(seconds, stop.set).start()
    start_cpu, start = cpu_seconds(), time.monotonic()
    follow(transport, str(path), state=lambda: JobState.RUNNING, write=lambda s: None, stop=stop)
    return (cpu_seconds() - start_cpu) / (time.monotonic() - start)


def pct(values: list, q: float) -> float:
    return values[min(len(values) - 1, int(q * len(values)))]


def report(label: str, latencies: list, cpu: float) -> bool:
    p50, p99 = pct(latencies, 0.50), pct(latencies, 0.99)
    ok_lat, ok_cpu = p99 < LATENCY_TARGET_S, cpu < CPU_TARGET
    print(
        f"{label:6} latency n={len(latencies)} p50={p50 * 1000:.0f} ms p99={p99 * 1000:.0f} ms "
        f"(target p99 < {LATENCY_TARGET_S * 1000:.0f} ms) {'PASS' if ok_lat else 'FAIL'}"
    )
    print(
        f"{label:6} idle CPU {cpu * 100:.2f}% of a core (target < {CPU_TARGET * 100:.0f}%) "
        f"{'PASS' if ok_cpu else 'FAIL'}"
    )
    return ok_lat and ok_cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=200)
    parser.add_argument("--idle", type=float, default=10.0, help="seconds of idle following to measure")
    parser.add_argument("--no-ssh", action="store_true")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-logs-"))
    ok = report(
        "local",
        measure_latency(LocalTransport(), tmp / "local.log", args.lines),
        measure_idle_cpu(LocalTransport(), tmp / "local-idle.log", args.idle),
    )
    if not args.no_ssh:
        from sshd import start_sshd

        server = start_sshd(tmp / "sshd")
        try:
            ssh = SSHTransport(server.alias, ssh_config=str(server.ssh_config))
            ssh.run(["true"])  # connect outside the measurement
            ok &= report(
                "ssh",
                measure_latency(ssh, tmp / "ssh.log", args.lines),
                measure_idle_cpu(ssh, tmp / "ssh-idle.log", args.idle),
            )
            ssh.close()
        finally:
            server.stop()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
