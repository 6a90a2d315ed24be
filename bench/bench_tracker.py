"""Scheduler queries per minute while tracking 100 jobs (the `local` / direct dialect, real processes).

    python bench/bench_tracker.py                  # 60 s of polling, 100 jobs
    python bench/bench_tracker.py --duration 20 --jobs 100 --finish 10

Starts --jobs real `sleep 600` processes from a path under `.../.hpc-launch/` (so the direct
dialect's `ps` check recognises them as ours), records them in a throw-away job store
(HPC_LAUNCH_STATE_DIR in a temp dir), then calls `jobs.refresh()` on the polling schedule a
`status --watch` or a follower uses (`protocol.POLL`: 1 s, x1.5, at most every 10 s).
Halfway through, --finish of the jobs are killed: each should cost one exit-file read, once.
Every `LocalTransport.run` (a scheduler query) and `read_from` (an exit-file read) is counted.

Target: ONE scheduler query per poll whatever the number of jobs (printed for 10 and 100 jobs).
Prints figures only; it never fails. All the sleeps it started are killed at the end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


class Counting:
    """Wraps LocalTransport.run / read_from (class level) and counts the calls."""

    def __init__(self, transport_cls):
        self.cls = transport_cls
        self.runs = Counter()
        self.reads = 0
        self._run, self._read = transport_cls.run, transport_cls.read_from

    def __enter__(self):
        counting = self
        real_run, real_read = self._run, self._read

        def run(transport, argv, **kw):
            counting.runs[argv[0]] += 1
            return real_run(transport, argv, **kw)

        def read_from(transport, path, offset, limit=1 << 20):
            counting.reads += 1
            return real_read(transport, path, offset, limit)

        self.cls.run, self.cls.read_from = run, read_from
        return self

    def __exit__(self, *exc):
        self.cls.run, self.cls.read_from = self._run, self._read

    def total_runs(self) -> int:
        return sum(self.runs.values())


def start_jobs(n: int, workdir: Path) -> list:
    marker_dir = workdir / ".hpc-launch"  # direct.MARKER: "/.hpc-launch/"
    marker_dir.mkdir(parents=True, exist_ok=True)
    sleep = marker_dir / "sleep"
    if not sleep.exists():
        sleep.symlink_to(shutil.which("sleep"))  # argv[0] keeps the symlink's path: ps shows the marker
    return [subprocess.Popen([str(sleep), "600"], start_new_session=True, stdin=subprocess.DEVNULL) for _ in range(n)]


def record_jobs(store, procs, workdir: Path, cluster: str) -> None:
    from hpc_launch.records import JobRecord

    for p in procs:
        store.add(
            JobRecord(
                job_id=str(p.pid),
                cluster=cluster,
                dialect="none",
                host="localhost",
                name="bench",
                workdir=str(workdir),
                script_path=str(workdir / ".hpc-launch" / "sleep"),
                log_path=str(workdir / f"bench.o{p.pid}"),
                exit_path=str(workdir / f"bench.o{p.pid}.exit"),
                submit_time=time.time(),
                state="running",
            )
        )


def stop(procs) -> None:
    for p in procs:
        if p.poll() is None:
            try:
                os.kill(p.pid, signal.SIGTERM)  # only the processes this bench started, by pid
            except ProcessLookupError:
                pass
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(p.pid, signal.SIGKILL)
            p.wait()


def queries_per_poll(n: int, workdir: Path, transport_for) -> tuple:
    from hpc_launch.records import JobStore
    from hpc_launch.jobs import refresh
    from hpc_launch.transport import LocalTransport

    procs = start_jobs(n, workdir)
    try:
        store = JobStore(workdir / f"jobs-{n}.sqlite")
        record_jobs(store, procs, workdir, f"local-{n}")
        records = store.list(cluster=f"local-{n}")
        with Counting(LocalTransport) as c:
            t0 = time.perf_counter()
            after = refresh(store, records, transport_for)
            elapsed = time.perf_counter() - t0
        running = sum(r.state == "running" for r in after)
        store.close()
        return c.total_runs(), c.reads, elapsed, running
    finally:
        stop(procs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=60.0, help="seconds of polling (default 60)")
    ap.add_argument("--jobs", type=int, default=100, help="jobs tracked during the polling run (default 100)")
    ap.add_argument("--finish", type=int, default=10, help="jobs killed halfway through (default 10)")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="bench-tracker-"))
    os.environ["HPC_LAUNCH_STATE_DIR"] = str(tmp / "state")
    os.environ["HPC_LAUNCH_CONFIG_DIR"] = str(tmp / "config")
    from hpc_launch import jobs as tracker
    from hpc_launch.protocol import POLL
    from hpc_launch.records import JobStore
    from hpc_launch.transport import LocalTransport, open_transport

    def transport_for(host):  # what the CLI's status/list commands pass
        return open_transport(None if host == "localhost" else host)

    workdir = tmp / "work"
    procs = []
    try:
        print("== scheduler queries per poll (one refresh() of every job; direct dialect: `ps -p PID,PID,...`)")
        for n in (10, 100):
            runs, reads, elapsed, running = queries_per_poll(n, workdir, transport_for)
            print(
                f"  {n:4d} jobs: {runs} scheduler query per poll, {reads} exit-file reads, {running}/{n} seen running,"
                f" refresh() {elapsed * 1000:.1f} ms   target 1 query: {'PASS' if runs == 1 else 'FAIL'}"
            )

        print(
            f"\n== polling {args.jobs} jobs for {args.duration:g} s on protocol.POLL (first {POLL.first:g} s, "
            f"x{POLL.factor:g}, at most {POLL.most:g} s) ({args.finish} killed at {args.duration / 2:g} s)"
        )
        procs = start_jobs(args.jobs, workdir)
        store = JobStore()
        record_jobs(store, procs, workdir, "local")
        polls, refresh_s, killed = 0, [], False
        delays = POLL.delays()
        with Counting(LocalTransport) as c:
            start = time.monotonic()
            kill_at, end_at, next_poll = start + args.duration / 2, start + args.duration, start
            while True:
                now = time.monotonic()
                if not killed and now >= kill_at:
                    stop(procs[: args.finish])
                    killed = True
                if now >= end_at:
                    break
                if now < next_poll:  # sleep to the next poll, waking once for the kill
                    time.sleep(max(0.0, min(next_poll, end_at, kill_at if not killed else end_at) - now))
                    continue
                active = store.list(cluster="local", active_only=True)
                if not active:
                    break
                t0 = time.perf_counter()
                tracker.refresh(store, active, transport_for)
                refresh_s.append(time.perf_counter() - t0)
                polls += 1
                next_poll = now + next(delays)
            elapsed = time.monotonic() - start
        states = Counter(r.state for r in store.list(cluster="local"))
        minutes = elapsed / 60
        q = c.total_runs()
        print(f"  polls: {polls} in {elapsed:.1f} s; scheduler queries: {q} ({dict(c.runs)})")
        print(f"  scheduler queries / minute:          {q / minutes:8.2f}")
        print(f"  scheduler queries / job / minute:    {q / minutes / args.jobs:8.4f}")
        print(
            f"  queries per poll:                    {q / max(polls, 1):8.2f}   target 1: "
            f"{'PASS' if q == polls else 'FAIL'}"
        )
        print(
            f"  exit-file reads:                     {c.reads:8d}   (expected "
            f"{args.finish}: one per job that ended, then never again)"
        )
        print(
            f"  refresh() wall time per poll:        {1000 * sorted(refresh_s)[len(refresh_s) // 2]:8.1f} ms median, "
            f"{1000 * max(refresh_s):.1f} ms max"
        )
        print(f"  final states: {dict(states)}")
        steady = 60 / POLL.most
        print(f"  (steady state: one query every {POLL.most:g} s = {steady:g} queries/minute, whatever the job count)")
    finally:
        stop(procs)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
