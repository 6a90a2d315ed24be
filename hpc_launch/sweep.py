"""`hpc-launch sweep`: a grid of DeepSpeed configurations (ZeRO stage, offload, precision, nodes,
micro-batch) as one job array where the scheduler has arrays and every point asks for the same
resources, else one job per point; every point checked before anything is submitted; tracked
to the end; then the report (hpc_launch/report/).

Every point is checked by the planner (plan.check_points: the entrypoint's own argument parser,
batch arithmetic, DeepSpeed's validator, the memory estimators); this module only orchestrates.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional

from msgspec.structs import replace

from .errors import SpecError
from .plan import check_points, label
from .sweep_grid import axis_values, expand, load_grid_file, with_point
from .sweep_jobs import Point, Submission, SweepPlan, describe, submit, submit_in_turn, watch

__all__ = [  # the grid and the jobs' names are the sweep's too: commands and tests import them from here
    "Point",
    "Run",
    "Submission",
    "SweepPlan",
    "axis_values",
    "describe",
    "expand",
    "label",
    "load_grid_file",
    "plan",
    "run",
    "submit",
    "submit_in_turn",
    "watch",
    "with_point",
]

if TYPE_CHECKING:
    from .site.profiles import ProfileFiles

# ---------------------------------------------------------------------------------------------
# the points as jobs, checked


def plan(
    spec,
    values: List[Dict[str, Any]],
    *,
    profile_file: ProfileFiles = None,
    separate: bool = False,
    stamp: Optional[str] = None,
    pack: bool = False,
    resume: Optional[str] = None,
) -> SweepPlan:
    """Every point resolved against the cluster (site rules included), then checked (batch
    arithmetic, DeepSpeed's validator, plan's memory estimators) before anything exists.
    `pack`: one job runs every point; `resume`: the id of a packed sweep whose journal says which
    points have ended (those are not run again)."""
    from . import dialects
    from .render import render
    from .prepare import Prepared, prepare

    if spec.script:
        raise SpecError(
            "a sweep runs the shipped entrypoint (its --zero, --offload, --precision, --micro-batch flags)",
            hint="leave out --script; pass other training flags with --train-args",
        )
    if resume and not pack:
        raise SpecError("--resume continues a packed sweep", hint="add --pack (and the same points)")
    stamp = stamp or datetime.now().strftime("%Y%m%d-%H%M%S-%f")[:-3]
    sweep_id = resume or f"{spec.name}-{stamp}"
    base = prepare(spec, profile_file=profile_file, stamp=stamp)
    base_args = list(base.job.train_args)
    points: List[Point] = []
    for i, value in enumerate(values):
        point_spec = replace(spec, train_args=with_point(base_args, value), nodes=value.get("nodes", spec.nodes))
        try:
            prepared = prepare(point_spec, profile_file=profile_file, stamp=f"{stamp}-p{i}")
        except SpecError as exc:
            raise SpecError(f"sweep point {i + 1} ({label(value)}): {exc.message}", hint=exc.hint) from None
        points.append(Point(i, value, prepared))
    result = SweepPlan(sweep_id, points)
    dialect = dialects.get(base.job.profile.dialect)
    shapes = {p.shape for p in points}
    if pack:
        result.submissions.append(_packed(sweep_id, points, stamp))
    elif dialect.supports(dialects.Arrays) and len(points) > 1 and len(shapes) == 1 and not separate:
        first = points[0].prepared
        script = render(first.job, stamp=stamp, array=[p.train_args for p in points])
        result.submissions.append(
            Submission(points, Prepared(script=script, host=first.host, uploads=first.uploads), array=True)
        )
    else:
        if dialect.supports(dialects.Arrays) and len(shapes) > 1 and not separate:
            result.notes.append(
                "the points ask for different resources (nodes): one job per point instead of one array"
            )
        for p in points:
            result.submissions.append(Submission([p], p.prepared, array=False))
    _check_user_limits(result)  # before check_points: it imports torch and DeepSpeed
    check_points(points)
    return result


def _packed(sweep_id: str, points: List[Point], stamp: str) -> Submission:
    """One job that runs every point in turn: the first point's job, its launch once per point."""
    from .pack import Packed, check_packable
    from .prepare import Prepared
    from .render import render

    why = check_packable(points)
    if why:
        raise SpecError(f"--pack: {why}", hint="give one --nodes value, or leave out --pack")
    first = points[0].prepared
    packed = Packed(sweep_id, [p.train_args for p in points], first.job.walltime_s)
    script = render(first.job, stamp=stamp, pack=packed)
    return Submission(points, Prepared(script=script, host=first.host, uploads=first.uploads), False, True)


def _check_user_limits(sweep: SweepPlan) -> None:
    """Every point is queued at once: refused before anything is submitted where the site lets
    a user have fewer jobs in the queue (each array task counts where the site counts it), and
    a note where fewer run at once."""
    from .site import rules as site_rules

    profile = sweep.points[0].prepared.job.profile
    jobs: Dict[Optional[str], int] = {}
    for sub in sweep.submissions:
        job = sub.prepared.job
        tasks = 1 if sub.packed else len(sub.points) if not sub.array or profile.array_tasks_count else 1
        jobs[job.queue] = jobs.get(job.queue, 0) + tasks * job.chain
    total = sum(jobs.values())
    site_rules.check_jobs(
        profile,
        jobs,
        what=f"the sweep submits {total} jobs at once",
        fewer=lambda most: f"a grid of at most {most} point(s)",
        nodes=max(p.prepared.job.nodes for p in sweep.points),
        walltime_s=max(p.prepared.job.walltime_s for p in sweep.points),
    )
    for name, count in jobs.items():
        q = profile.queues.get(name or "")
        running = q.max_user_running if q and q.max_user_running else profile.max_user_running
        if running and count > running:
            sweep.notes.append(
                f"{profile.name} runs {running} of a user's jobs at once on {name}: the points wait their turn"
            )


# ---------------------------------------------------------------------------------------------
# `hpc-launch sweep`, start to report


@dataclass
class Run:
    """What `run` tells its caller to show: the sweep's id, progress lines, the exit code."""

    say: Callable[[str], Any]  # a note for the user (stderr, "hpc-launch: ..." )
    line: Callable[[str], Any]  # a line as it is (stderr): submissions, the dry-run's plan
    announce_id: Callable[[str], Any]  # the sweep's id, the one line on stdout
    show_script: Callable[[str], Any] = lambda text: None  # --dry-run: each script


def _packed_points(ended: List[Any], ui: Run, sweep_id: str) -> List[Any]:
    """The packed job's points as records from its journal; how to resume when some did not run."""
    from .pack import expand

    points = expand(ended)
    cut = [r for r in points if r.exit_code is None and r.state != "done"]
    if cut:
        ui.say(
            f"{len(cut)} point(s) did not run to their end in job {ended[0].job_id} ({ended[0].state}): "
            f"run the same sweep command with --pack --resume {sweep_id} to run only those"
        )
    return points


def run(
    spec,
    values: List[Dict[str, Any]],
    ui: Run,
    *,
    profile_file: ProfileFiles = None,
    separate: bool = False,
    out: Optional[str] = None,
    no_wait: bool = False,
    dry_run: bool = False,
    pack: bool = False,
    resume: Optional[str] = None,
) -> int:
    """Plan and check every point, submit, wait for all, write the report. Returns the exit code
    (0 when every point is done). Ctrl-C says what keeps running and how to reach it."""
    from . import report as rp
    from .records import JobStore

    sweep = plan(spec, values, profile_file=profile_file, separate=separate, pack=pack, resume=resume)
    for line in sweep.notes:
        ui.say(line)
    if dry_run:
        for sub in sweep.submissions:
            ui.show_script(sub.prepared.script.text)
        ui.line(describe(sweep))
        return 0
    store = JobStore()
    ui.announce_id(sweep.sweep_id)

    def announce(record) -> None:
        extra = record.extra or {}
        if extra.get("pack"):
            ui.line(
                f"submitted the {len(sweep.points)} points as one packed job {record.job_id}; log: {record.log_path}"
            )
            return
        within = f" (task of array {extra['array']})" if extra.get("array") else ""
        ui.line(
            f"submitted point {extra.get('point_index', 0) + 1} [{label(extra.get('point', {}))}] as "
            f"{record.job_id}{within}; log: {record.log_path}"
        )

    in_turn = sweep.shares_one_machine and not no_wait and not pack
    try:
        if in_turn:
            ui.say("no scheduler on this cluster: the points run one after another, so none slows another's figures")
            ended = submit_in_turn(sweep, store=store, on_recorded=announce)
        else:
            records = submit(sweep, store=store, on_recorded=announce)
            if no_wait:
                ui.say(
                    f"sweep {sweep.sweep_id}: follow it with `hpc-launch logs -f {sweep.sweep_id}`, "
                    f"report with `hpc-launch report {sweep.sweep_id}`"
                )
                return 0
            ended = watch(store, records)
        if pack:
            ended = _packed_points(ended, ui, sweep.sweep_id)
    except KeyboardInterrupt:
        later = " (points not yet started are not submitted)" if in_turn else ""
        ui.say(
            f"interrupted: the sweep's submitted jobs keep running{later}. "
            f"Follow: hpc-launch logs -f {sweep.sweep_id}   Report: hpc-launch "
            f"report {sweep.sweep_id}   Stop: hpc-launch cancel {sweep.sweep_id}"
        )
        raise
    written, notes = rp.write_for(ended, out or sweep.sweep_id, f"sweep {sweep.sweep_id} on {ended[0].cluster}")
    for note in notes:
        ui.say(note)
    ui.say("report: " + ", ".join(written))
    return 0 if all(r.state == "done" for r in ended) else 1
