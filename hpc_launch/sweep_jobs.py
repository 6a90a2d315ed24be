"""A sweep's points as jobs: the plan's shape (`Point`, `Submission`, `SweepPlan`), what --dry-run
prints, submitting every submission with each point's tags on its record, and watching them
until all have ended (one scheduler query per cluster per poll)."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

from .jobs.connect import TransportFor, transport_for
from .plan import label
from .protocol import Backoff


@dataclass
class Point:
    index: int
    values: Dict[str, Any]
    prepared: Any  # submit.Prepared of this point alone
    entry: Any = None  # the entrypoint's parsed arguments

    @property
    def label(self) -> str:
        return label(self.values)

    @property
    def train_args(self) -> List[str]:
        return list(self.prepared.job.train_args)

    @property
    def shape(self) -> tuple:
        """What the scheduler is asked for: points with the same shape can share one array."""
        job = self.prepared.job
        return (
            job.nodes,
            job.procs_per_node,
            job.gpus_per_node,
            job.queue,
            job.walltime_s,
            job.group,
            self.prepared.host,
        )


@dataclass
class Submission:
    """One submit command of the sweep: an array of several points, or one point's job."""

    points: List[Point]
    prepared: Any
    array: bool
    packed: bool = False  # every point in this one job, one after another (`--pack`: hpc_launch/pack.py)


@dataclass
class SweepPlan:
    sweep_id: str
    points: List[Point]
    submissions: List[Submission] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)

    @property
    def shares_one_machine(self) -> bool:
        """No scheduler places the points: run together they would share the same cores (or GPU)
        and every throughput figure in the report would be wrong. They run one after another."""
        from . import dialects

        return not dialects.get(self.points[0].prepared.job.profile.dialect).has_scheduler


def describe(sweep: SweepPlan) -> str:
    """What --dry-run prints: each submit command and the points it runs."""
    lines = [f"# sweep {sweep.sweep_id}: {len(sweep.points)} point(s), {len(sweep.submissions)} submission(s)"]
    lines += [f"# note: {n}" for n in sweep.notes]
    for sub in sweep.submissions:
        kind = (
            f"array of {len(sub.points)} tasks"
            if sub.array
            else f"one packed job of {len(sub.points)} points, one after another"
            if sub.packed
            else "one job"
        )
        lines.append(f"# {kind}, script {sub.prepared.script_path}")
        for p in sub.points:
            lines.append(
                f"#   point {p.index + 1}: {p.label}, {p.prepared.job.nodes} node(s) x "
                f"{p.prepared.job.procs_per_node} rank(s): {' '.join(p.train_args)}"
            )
        lines.append(sub.prepared.submit_display())
    return "\n".join(lines)


def _extra_packed(sweep: SweepPlan, sub: Submission) -> dict:
    from .pack import extra_for

    return {"sweep": sweep.sweep_id, "points": len(sweep.points), **extra_for(sweep.sweep_id, sub.points)}


def _extra(sweep: SweepPlan, p: Point) -> dict:
    return {
        "sweep": sweep.sweep_id,
        "point_index": p.index,
        "points": len(sweep.points),
        "point": dict(p.values),
        "nodes": p.prepared.job.nodes,
    }


def submit(sweep: SweepPlan, *, store=None, on_recorded: Optional[Callable[[Any], None]] = None) -> List[Any]:
    """Submit every submission; returns the records in point order. A failure after some
    submissions stops there: what was submitted stays recorded (and is said)."""
    from . import jobs
    from .records import JobStore

    store = store or JobStore()
    records: List[Any] = []
    for sub in sweep.submissions:
        if sub.array:
            recs = jobs.submit_array(
                sub.prepared, [_extra(sweep, p) for p in sub.points], store=store, on_recorded=on_recorded
            )
            records += recs
        else:
            p = sub.points[0]

            def tag(record, p=p, sub=sub):
                more = _extra_packed(sweep, sub) if sub.packed else _extra(sweep, p)
                record.extra = {**(record.extra or {}), **more}
                store.update(record.cluster, record.job_id, extra=record.extra)
                if on_recorded is not None:
                    on_recorded(record)

            records.append(jobs.submit(sub.prepared, store=store, on_recorded=tag))
    return sorted(records, key=lambda r: r.extra.get("point_index", 0))


def submit_in_turn(
    sweep: SweepPlan,
    transport_for: TransportFor = transport_for,
    *,
    store=None,
    on_recorded: Optional[Callable[[Any], None]] = None,
    write: Callable[[str], Any] = sys.stderr.write,
    sleep: Callable[[float], None] = time.sleep,
) -> List[Any]:
    """Each submission only once the one before it has ended (a sweep on a machine with no
    scheduler); returns the ended records in point order."""
    ended: List[Any] = []
    for sub in sweep.submissions:
        one = SweepPlan(sweep.sweep_id, sub.points, [sub])
        ended += watch(
            store, submit(one, store=store, on_recorded=on_recorded), transport_for, write=write, sleep=sleep
        )
    return ended


def watch(
    store,
    records: List[Any],
    transport_for: TransportFor = transport_for,
    *,
    write: Callable[[str], Any] = sys.stderr.write,
    sleep: Callable[[float], None] = time.sleep,
    poll: Optional[Backoff] = None,
) -> List[Any]:
    """Until every job has ended: one scheduler query per cluster per poll (`poll`, or the pace
    jobs.poll_for picks for them), a line per job as it ends. Returns the records as they ended."""
    from .jobs import poll_for, refresh
    from .states import JobState

    poll = poll or poll_for(records)

    current = {(r.cluster, r.job_id): r for r in records}
    said: set = set()
    delay = poll.first
    while True:
        active = [r for key, r in current.items() if key not in said and not JobState(r.state).terminal]
        if active:
            for r in refresh(store, active, transport_for):
                current[(r.cluster, r.job_id)] = r
        changed = False
        for key, r in current.items():
            if key not in said and JobState(r.state).terminal:
                said.add(key)
                changed = True
                code = f" (exit code {r.exit_code})" if r.exit_code is not None else ""
                what = label((r.extra or {}).get("point", {})) if (r.extra or {}).get("point") else r.name
                write(f"hpc-launch: {r.job_id} [{what}] {r.state}{code}; {len(said)} of {len(current)} ended\n")
        if len(said) == len(current):
            return [current[(r.cluster, r.job_id)] for r in records]
        delay = poll.after(delay, changed)
        sleep(delay)
