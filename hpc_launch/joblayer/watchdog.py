"""The watchdog: hung ranks and stragglers found while the job runs, with the rank and host named.

Each rank publishes its progress (step, when it got there, and its own work summed over its
steps: data and forward, which wait for no other rank) in the rendezvous store, at most once a
second. A thread in every rank beats a heartbeat there, and the lowest live rank's reads
everyone's progress and judges (the others read rank 0's heartbeat and the verdict: O(ranks)
reads a look in all, not O(ranks^2); docs/preflight.md has the model to 10,000 nodes): a thread
keeps running while its rank's main thread waits inside a collective, and stops only with its
process (SIGSTOP, a frozen host), so a stale heartbeat names the rank that stopped. The monitor of
a rank is never the rank's own main thread; a rank whose store (rank 0's process) stops
answering concludes that rank 0 hung.

- A hang: no rank has advanced for the bound, max(floor, factor x the median step time)
  ($HPC_LAUNCH_HANG_S, default 300 s; $HPC_LAUNCH_HANG_FACTOR, default 20). Every live rank dumps
  its Python stacks into the log, the lowest live rank names the rank and host that stopped first
  (`[hpc-launch] hang: ...`, read by `doctor`), reports that host bad, and every live rank exits
  with protocol.EXIT_HANG; the launcher then ends the rest.
- A straggler: a rank whose own work per step, averaged over the steps since the look before, is
  above $HPC_LAUNCH_STRAGGLER_FACTOR (default 1.5) x the median rank's in 2 of the last 3 looks is
  named once (`[hpc-launch] straggler: ...`).
Checkpoints and the final evaluation pause it (`busy`), since ranks stop advancing then by design.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import socket
import statistics
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from datetime import timedelta
from typing import Deque, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from hpc_launch import protocol
from hpc_launch.one_line import say

from .ranks import RankInfo

_KEY = "hpc-launch/watchdog"
PUBLISH_EVERY_S = 1.0
STRAGGLER_LOOKS = 3  # a straggler is slow in most of the last this many looks
WARMUP_STEPS = 10  # the first steps build caches and allocators: their time says nothing about the rank


@dataclass(frozen=True)
class Progress:
    rank: int
    host: str
    step: int
    at: float  # wall time the rank reached `step`
    work_sum: float  # its own work (data + forward) summed over the steps after the warm-up
    beat: float  # the watchdog thread's last heartbeat
    busy: bool  # checkpointing or evaluating: not advancing by design
    pid: int = 0
    worked: int = 0  # how many steps work_sum holds

    def encode(self) -> str:
        return (
            f"{self.step} {self.at:.3f} {self.work_sum:.6f} {self.worked} {self.beat:.3f} {int(self.busy)} "
            f"{self.pid} {self.host}"
        )

    @classmethod
    def decode(cls, rank: int, raw: str) -> "Progress":
        step, at, work, worked, beat, busy, pid, host = raw.split(" ", 7)
        return cls(rank, host, int(step), float(at), float(work), float(beat), busy == "1", int(pid), int(worked))


@dataclass(frozen=True)
class Limits:
    floor_s: float = 300.0
    factor: float = 20.0
    straggler: float = 1.5

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "Limits":
        def num(key: str, default: float) -> float:
            try:
                return float(env.get(key) or default)
            except ValueError:
                return default

        return cls(
            num("HPC_LAUNCH_HANG_S", cls.floor_s),
            num("HPC_LAUNCH_HANG_FACTOR", cls.factor),
            num("HPC_LAUNCH_STRAGGLER_FACTOR", cls.straggler),
        )


# ---- the rules, on what the store holds (pure: tested without a job) -----------------------------


def hang_bound(progress: List[Progress], limits: Limits, step_times: List[float]) -> float:
    typical = statistics.median(step_times) if step_times else 0.0
    return max(limits.floor_s, limits.factor * typical)


def stalled(progress: List[Progress], now: float, bound: float) -> Optional[Progress]:
    """The rank that stopped first, if no rank has advanced within `bound` (else None).

    A rank whose heartbeat is stale stopped as a process (SIGSTOP, a frozen host): it is the one.
    Otherwise the rank with the lowest step, earliest there, is the one the others wait for.
    A heartbeat stale for the whole bound is a hang even before the first step or in a checkpoint:
    those pause the progress rule, never the heartbeat thread of a live process."""
    gone = [p for p in progress if now - p.beat > bound]
    if gone:
        return min(gone, key=lambda p: p.beat)
    if not progress or any(p.busy for p in progress) or min(p.step for p in progress) < 1:
        return None  # before the first step everyone is still starting; a checkpoint takes its time
    if now - max(p.at for p in progress) < bound:
        return None
    frozen = [p for p in progress if now - p.beat > bound / 2]
    if frozen:
        return min(frozen, key=lambda p: p.beat)
    return min(progress, key=lambda p: (p.step, p.at))


def stragglers(work: Mapping[int, float], factor: float) -> Dict[int, float]:
    """Ranks whose own work per step is above `factor` x the median rank's: rank -> how many times."""
    known = [w for w in work.values() if w > 0]
    if len(known) < 2:
        return {}
    median = statistics.median(known)
    if median <= 0:
        return {}
    return {rank: w / median for rank, w in work.items() if w > factor * median}


class StragglerJudge:
    """The straggler rule across the judging rank's looks, on what the ranks published.

    A rank's work per step is averaged over all its steps since the look before (Progress carries
    sums), not sampled at the look: the hog beside a slowed rank takes its CPU in slices, so its
    last few steps were fast at some looks (seen on the testbed: 6.2 ms against the median's 4.8 ms
    at one look, 9.8 ms against 3.7 ms at the next), and a rule that needed every look slow was reset by
    one such look, often until the job had ended. Slow in 2 of the last 3 looks: one look's
    outlier, fast or slow, decides nothing. Memory: one entry per rank; reads: none of its own."""

    def __init__(self, factor: float):
        self.factor = factor
        self._since: Dict[int, Tuple[float, int]] = {}  # rank -> (work_sum, worked) at its last counted look
        self._work: Dict[int, float] = {}  # rank -> its work per step over its last counted interval
        self._looks: Deque[Dict[int, float]] = deque(maxlen=STRAGGLER_LOOKS)
        self.named: set = set()

    def look(self, progress: Sequence[Progress]) -> List[Tuple[Progress, float, float]]:
        """This look's newly named stragglers: (its progress, how many times slower, the median work)."""
        for p in progress:
            then = self._since.get(p.rank)
            if then is not None and p.worked > then[1]:
                self._work[p.rank] = (p.work_sum - then[0]) / (p.worked - then[1])
            if then is None or p.worked > then[1]:  # a rank with no new step keeps its last interval's
                self._since[p.rank] = (p.work_sum, p.worked)
        slow = stragglers(self._work, self.factor)
        self._looks.append(slow)
        named = []
        for p in progress:
            if p.rank in slow and p.rank not in self.named and sum(p.rank in look for look in self._looks) >= 2:
                self.named.add(p.rank)
                named.append((p, slow[p.rank], statistics.median(w for w in self._work.values() if w > 0)))
        return named

    def work_s(self, rank: int) -> float:
        return self._work.get(rank, 0.0)


# ---- the running watchdog ------------------------------------------------------------------------


def _say(line: str) -> None:
    say(line)


class Watchdog:
    def __init__(self, info: RankInfo, limits: Limits, env: Mapping[str, str]):
        import torch.distributed as tdist

        self.info = info
        self.limits = limits
        self.host = socket.gethostname()
        self.prefix = f"{_KEY}/{env.get('TORCHELASTIC_RESTART_COUNT', '0')}"
        self.poll_s = max(0.5, min(5.0, limits.floor_s / 6))
        # its own connection to the store: never waits behind the main thread's requests
        self.store = tdist.TCPStore(
            env["MASTER_ADDR"],
            int(env["MASTER_PORT"]),
            info.world_size,
            is_master=False,
            timeout=timedelta(seconds=max(5.0, self.poll_s * 2)),
            wait_for_workers=False,
        )
        self.work_label = "its own data+forward"  # what the work measures (the job layer's is CPU time)
        self.step = 0
        self.at = time.time()
        self.work_sum = 0.0  # its own work over the steps after the warm-up, and how many
        self.worked = 0
        self.busy_now = False
        self.step_times: List[float] = []
        self._published = 0.0
        self._lock = threading.Lock()
        self._judge = StragglerJudge(limits.straggler)
        self._store_silent_since: Optional[float] = None
        self._frozen_here: List[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="hpc-launch-watchdog", daemon=True)

    # -- called by the training loop (main thread) --

    def start(self) -> "Watchdog":
        self._publish(time.time(), force=True)
        self._thread.start()
        return self

    def progress(self, step: int, work_s: float) -> None:
        now = time.time()
        with self._lock:
            if self.step:
                self.step_times.append((now - self.at) / max(1, step - self.step))
                del self.step_times[:-50]
            self.step, self.at = step, now
            if step > WARMUP_STEPS:  # the first steps build caches and allocators: not the rank's pace
                self.work_sum += work_s
                self.worked += 1
        if now - self._published >= PUBLISH_EVERY_S:
            self._publish(now)

    @contextlib.contextmanager
    def busy(self) -> Iterator[None]:
        self.busy_now = True
        self._publish(time.time(), force=True)
        try:
            yield
        finally:
            self.busy_now = False
            self.at = time.time()
            self._publish(self.at, force=True)

    def stop(self) -> None:
        self._stop.set()
        self.busy_now = True  # the rest (evaluation, the last barrier) is not watched
        self._publish(time.time(), force=True)

    # -- the thread --

    def _publish(self, now: float, force: bool = False) -> None:
        with self._lock:
            p = Progress(
                self.info.rank,
                self.host,
                self.step,
                self.at,
                self.work_sum,
                now,
                self.busy_now,
                os.getpid(),
                self.worked,
            )
        try:
            self.store.set(f"{self.prefix}/{self.info.rank}", p.encode())
            self._published = now
        except Exception:  # noqa: BLE001 - the store's host stopped answering: the thread will see it
            if force:
                pass

    def _key(self, rank: int) -> str:
        return f"{self.prefix}/{rank}"

    def _read(self) -> List[Progress]:
        raw = self.store.multi_get([self._key(r) for r in range(self.info.world_size)])
        return [Progress.decode(r, v.decode()) for r, v in enumerate(raw)]

    def _judges(self, now: float) -> bool:
        """Whether this rank reads every rank's progress this look: the lowest rank whose heartbeat
        is fresh does (rank 0, unless it stopped). The others read one rank's progress, more only
        while the ranks below them are stale, so a look costs O(ranks) store reads in all, not
        O(ranks^2) (issue 28: 3,072 ranks each reading 3,072 keys every few seconds)."""
        for r in range(self.info.rank):
            [raw] = self.store.multi_get([self._key(r)])
            if now - Progress.decode(r, raw.decode()).beat <= self._fresh_s():
                return False
        return True

    def _fresh_s(self) -> float:
        """A heartbeat this recent is a live rank's (the straggler rule's window)."""
        return max(self.poll_s * 3, 10)

    def _watch(self) -> None:
        while not self._stop.wait(self.poll_s):
            now = time.time()
            try:
                self._publish(now)  # the heartbeat, even while the main thread waits in a collective
                progress = self._read() if self._judges(now) else None
                verdict = self.store.check([f"{self.prefix}/hang"]) and self.store.get(f"{self.prefix}/hang").decode()
                self._store_silent_since = None
            except Exception:  # noqa: BLE001 - rank 0's process serves the store; it stopped answering
                self._store_silent_since = self._store_silent_since or now
                if now - self._store_silent_since > self.limits.floor_s and self.info.local_rank == 0:
                    self._end(
                        f"rank 0 on {os.environ.get('MASTER_ADDR', '?')} (the rendezvous store there stopped answering "
                        f"for {now - self._store_silent_since:.0f} s: rank 0's process is stopped or its host froze)",
                        announce=True,
                    )
                continue
            if verdict:
                self._end(verdict, announce=False)
            if progress is not None:
                self._check(progress, now)

    def _check(self, progress: List[Progress], now: float) -> None:
        bound = hang_bound(progress, self.limits, self.step_times)
        culprit = stalled(progress, now, bound)
        self._frozen_here = [
            p.pid for p in progress if p.host == self.host and now - p.beat > bound / 2 and p.pid != os.getpid()
        ]
        if culprit is not None:
            live = [p for p in progress if now - p.beat <= bound / 2]
            if live and min(p.rank for p in live) == self.info.rank:  # the lowest live rank speaks for all
                why = (
                    f"stopped: no heartbeat for {now - culprit.beat:.0f} s (the process is stopped or its host froze)"
                    if now - culprit.beat > bound / 2
                    else (
                        f"made no progress for {now - culprit.at:.0f} s at "
                        f"step {culprit.step} (alive: stuck in its own code)"
                    )
                )
                line = (
                    f"rank {culprit.rank} on {culprit.host} {why}; no rank advanced for "
                    f"{now - max(p.at for p in progress):.0f} s (bound {bound:.0f} s)"
                )
                for host, pids in _frozen_by_host(progress, now, bound / 2).items():
                    self.store.set(f"{self.prefix}/frozen/{host}", " ".join(map(str, pids)))
                if self.store.compare_set(f"{self.prefix}/hang", "", line).decode() == line:
                    if len({p.host for p in progress}) > 1:  # on one host there is no other to move to
                        _say(protocol.report_bad_host(culprit.host, f"watchdog: rank {culprit.rank} {why}"))
                    self._end(line, announce=True, others=[p.rank for p in live if p.rank != self.info.rank])
            return
        if self.info.rank != min(p.rank for p in progress if now - p.beat <= max(self.poll_s * 3, 10)):
            return
        for p, times, median in self._judge.look(progress):
            _say(
                f"{protocol.STRAGGLER_PREFIX}rank {p.rank} on {p.host} is {times:.1f}x slower than the median rank "
                f"({self.work_label} {self._judge.work_s(p.rank) * 1000:.0f} ms vs {median * 1000:.0f} ms per step; "
                f"factor {self.limits.straggler})"
            )

    def _frozen_from_judge(self) -> List[int]:
        """The stopped processes on this host, as the rank that judged saw them (only it read all)."""
        key = f"{self.prefix}/frozen/{self.host}"
        if not self.store.check([key]):
            return []
        return [int(pid) for pid in self.store.get(key).decode().split() if int(pid) != os.getpid()]

    def _end(self, line: str, *, announce: bool, others: Sequence[int] = ()) -> None:
        """Dump this rank's stacks, say the verdict (once, by the rank that found it) and leave.

        The rank that found it waits (briefly) until the other live ranks have dumped theirs: its
        own exit makes the launcher end the rest, and a rank ended first leaves no stacks."""
        _say(f"[hpc-launch] stacks of rank {self.info.rank} on {self.host} (pid {os.getpid()}):")
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        sys.stdout.flush()
        if announce:
            _say(f"{protocol.HANG_PREFIX}{line}")
            keys = [f"{self.prefix}/dumped/{r}" for r in others]
            deadline = time.time() + 2 * self.poll_s + 5
            while keys and time.time() < deadline:
                with contextlib.suppress(Exception):
                    if self.store.check(keys):
                        break
                time.sleep(0.2)
        else:
            with contextlib.suppress(Exception):
                self.store.set(f"{self.prefix}/dumped/{self.info.rank}", "1")
                self._frozen_here = self._frozen_from_judge()
            time.sleep(1.0)  # the rank that announced exits first: the launcher reports it as the cause
        protocol.report_verdict(protocol.EXIT_HANG)
        # A stopped rank ignores the launcher's SIGTERM (DeepSpeed's launcher then waits 30 s per
        # rank before SIGKILL): end the frozen ranks of this host now, as the job is ending anyway.
        for pid in self._frozen_here:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        os._exit(protocol.EXIT_HANG)


def _frozen_by_host(progress: List[Progress], now: float, stale_s: float) -> Dict[str, List[int]]:
    """The stopped ranks' processes on each host, which that host's live ranks end as the job ends."""
    frozen: Dict[str, List[int]] = {}
    for p in progress:
        if now - p.beat > stale_s and p.pid:
            frozen.setdefault(p.host, []).append(p.pid)
    return frozen


def busy(wd: Optional[Watchdog]) -> contextlib.AbstractContextManager:
    """`with busy(wd):` around work during which ranks do not advance by design (a checkpoint)."""
    return wd.busy() if wd is not None else contextlib.nullcontext()


def start(info: RankInfo, env: Mapping[str, str] = os.environ) -> Optional[Watchdog]:
    """The watchdog for this rank, or None (one rank, or $HPC_LAUNCH_WATCHDOG=0)."""
    if info.world_size < 2 or env.get("HPC_LAUNCH_WATCHDOG") == "0":
        return None
    return Watchdog(info, Limits.from_env(env), env).start()
