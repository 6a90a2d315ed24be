"""The scaling arithmetic: one configuration at several node counts, its speedup and parallel
efficiency, and for a planned training (samples, steps or epochs) its wall time and node-hours,
with the node count to propose."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from ..errors import HpcLaunchError
from .rows import Row


@dataclass(frozen=True)
class Plan:
    """A planned training (`report --plan-samples N`, `--plan-steps N` or `--plan-epochs N`), the
    efficiency floor, and where it would run (`--queue`, `--link-walltime`)."""

    samples: Optional[int] = None
    steps: Optional[int] = None  # times each node count's measured global batch
    epochs: Optional[int] = None  # times each node count's steps/epoch and global batch
    min_efficiency: float = 0.7
    queue: Optional[str] = None
    link_walltime_s: Optional[int] = None

    @property
    def planned(self) -> bool:
        return self.samples is not None or self.steps is not None or self.epochs is not None


@dataclass
class ScalePoint:
    nodes: int
    jobs: int  # done jobs at this node count; samples_per_sec is their median
    samples_per_sec: float
    speedup: float  # samples_per_sec / the smallest node count's
    ideal_speedup: float  # nodes / the smallest node count
    efficiency: float  # speedup / ideal_speedup
    global_batch: Optional[int]  # None when the jobs' training lines disagree or lack it
    planned_samples: Optional[int]
    wall_h: Optional[float]  # planned_samples / samples_per_sec, in hours
    node_hours: Optional[float]  # wall_h x nodes
    proposed: bool = False
    startup_s: Optional[float] = None  # the longest start-up of the jobs at this node count
    # language models: the jobs' median tokens/s and MFU (nan: the device's peak is unknown)
    tokens_per_sec: Optional[float] = None
    mfu: Optional[float] = None


@dataclass
class ScaleGroup:
    configuration: str
    points: List[ScalePoint]
    excluded: List[Row]  # jobs of this configuration without a figure (failed, or no step line)
    proposal: str = ""
    cluster: str = ""  # where its jobs ran ("" when on several clusters)
    site: list = field(default_factory=list)  # the plan on the site (allocation.py), one line each


def _median(values: List[Optional[float]]) -> Optional[float]:
    """The median where every job has the figure; nan (MFU unknown) where any says unknown."""
    if not values or any(v is None for v in values):
        return None
    known = [float(v) for v in values if v is not None]
    return float("nan") if any(v != v for v in known) else float(statistics.median(known))


def _one(values) -> Optional[int]:
    found = set(values)
    return found.pop() if len(found) == 1 else None


def _planned_samples(plan: Optional[Plan], at: Sequence[Row], nodes: int) -> Optional[int]:
    if plan is None:
        return None
    if plan.samples is not None:
        return plan.samples
    gb = _one(r.global_batch for r in at)
    if plan.steps is not None:
        return plan.steps * gb if gb else None
    if plan.epochs is not None:
        per_epoch = _one(r.steps_per_epoch for r in at)
        if not (gb and per_epoch):
            raise HpcLaunchError(
                f"--plan-epochs: the jobs at {nodes} node(s) do not record the steps of an epoch "
                "(the entrypoint's `training ... global=N ... steps/epoch=M` line)",
                hint="give --plan-samples N instead: the epochs times the training set's size",
            )
        # what `--epochs N` trains at this world size: drop_last leaves out the remainder of the set
        return plan.epochs * per_epoch * gb
    return None


def _propose(group: ScaleGroup, plan: Optional[Plan]) -> None:
    """The most nodes still at the efficiency floor: the fastest allocation that wastes at most
    (1 - floor) of its node-hours. For a fixed number of samples node-hours fall with efficiency
    alone, so the cheapest is always the most efficient; the line gives the premium over it."""
    floor = plan.min_efficiency if plan else Plan().min_efficiency
    points = group.points
    base = points[0]
    within = [p for p in points if p.efficiency >= floor]  # the base (efficiency 1) always is
    pick = max(within, key=lambda p: p.nodes)
    pick.proposed = True
    line = (
        f"propose {pick.nodes} node(s): the most nodes measured at >= {floor:.0%} parallel efficiency "
        f"({pick.efficiency:.0%}, {pick.speedup:.2f}x the samples/s of {base.nodes} node(s))"
    )
    priced = [p for p in within if p.node_hours is not None]
    if pick.node_hours is not None and pick.wall_h is not None and priced:
        cheap = min(priced, key=lambda p: (p.node_hours, p.nodes))
        line += f"; {pick.wall_h:.2f} h wall, {pick.node_hours:.1f} node-hours"
        if cheap is pick:
            line += " (also the cheapest)"
        else:
            premium = pick.node_hours / cheap.node_hours - 1  # type: ignore[operator]
            line += f" ({premium:+.0%} over the cheapest, {cheap.nodes} node(s): {cheap.node_hours:.1f} node-hours)"
    above = [p for p in points if p.nodes > pick.nodes]
    if above:
        line += f"; {above[0].nodes} node(s) fall to {above[0].efficiency:.0%}"
    group.proposal = line


def scaling(rows: Sequence[Row], plan: Optional[Plan] = None) -> Tuple[List[ScaleGroup], str]:
    """A scaling table per configuration measured at two or more node counts, and, when there is
    none, the one line that says why."""
    by_conf: Dict[str, List[Row]] = {}
    for r in rows:
        by_conf.setdefault(r.configuration, []).append(r)
    groups: List[ScaleGroup] = []
    measured_counts: Dict[str, List[int]] = {}
    for conf, members in by_conf.items():
        good = [r for r in members if r.state == "done" and (r.samples_per_sec or 0) > 0 and r.nodes]
        excluded = [r for r in members if r not in good]
        counts = sorted({int(r.nodes or 0) for r in good})
        measured_counts[conf] = counts
        if len(counts) < 2:
            continue
        points: List[ScalePoint] = []
        for n in counts:
            at = [r for r in good if r.nodes == n]
            sps = float(statistics.median(float(r.samples_per_sec or 0.0) for r in at))
            base = points[0].samples_per_sec if points else sps
            planned = _planned_samples(plan, at, n)
            wall_h = planned / sps / 3600 if planned is not None else None
            startups = [r.startup_s for r in at if r.startup_s is not None]
            points.append(
                ScalePoint(
                    nodes=n,
                    jobs=len(at),
                    samples_per_sec=sps,
                    speedup=sps / base,
                    ideal_speedup=n / counts[0],
                    efficiency=(sps / base) / (n / counts[0]),
                    global_batch=_one(r.global_batch for r in at),
                    planned_samples=planned,
                    wall_h=wall_h,
                    node_hours=wall_h * n if wall_h is not None else None,
                    startup_s=max(startups) if startups else None,
                    tokens_per_sec=_median([r.tokens_per_sec for r in at]),
                    mfu=_median([r.mfu for r in at]),
                )
            )
        clusters = {r.cluster for r in good}
        group = ScaleGroup(conf, points, excluded, cluster=clusters.pop() if len(clusters) == 1 else "")
        _propose(group, plan)
        groups.append(group)
    if groups:
        return groups, ""
    hint = "report jobs of one configuration run at several node counts (hpc-launch sweep --nodes 1,2,4,8)"
    measured = {c: n for c, n in measured_counts.items() if n}
    if not measured:
        return [], f"no scaling table: no job ended done with a samples/s figure ({hint})"
    if len(measured) == 1:
        (counts,) = measured.values()
        return [], f"no scaling table: every measured job ran on {counts[0]} node(s) ({hint})"
    return [], f"no scaling table: no configuration was measured at more than one node count ({hint})"
