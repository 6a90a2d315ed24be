"""`hpc-launch sweep`: a grid of DeepSpeed configurations (ZeRO stage, offload, precision, nodes,
micro-batch) as one job array where the scheduler has arrays and every point asks for the same
resources, else one job per point; every point checked before anything is submitted; tracked
to the end; then the report (hpc_launch/report/).

Every point is checked by the planner (plan.check_points: the entrypoint's own argument parser,
batch arithmetic, DeepSpeed's validator, the memory estimators); this module only orchestrates.
"""

from __future__ import annotations

import itertools
import sys
import time
from dataclasses import dataclass, field

from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple

from msgspec.structs import replace

from .errors import SpecError
from .plan import AXES, FLAGS, check_points, entry_choices, label, undefined
from .jobs.connect import TransportFor, transport_for
from .protocol import POLL, Backoff

if TYPE_CHECKING:
    from .profiles import ProfileFiles

_FILE_KEYS = {"micro-batch": "micro_batch", "micro_batches": "micro_batch", "stage": "zero"}


def axis_values(axis: str, raw: Any, where: str) -> List[Any]:
    """One axis's values from a flag (`0,1,2`) or a YAML value (a list or one value), checked."""
    items = (
        raw if isinstance(raw, list) else [v.strip() for v in str(raw).split(",")] if isinstance(raw, str) else [raw]
    )
    items = [v for v in items if v != ""]
    if not items:
        raise SpecError(
            f"{where}: no values", hint=f"give one or more, comma-separated, e.g. {FLAGS.get(axis, '--nodes')} 1,2"
        )
    out: List[Any] = []
    for item in items:
        if axis in ("zero", "nodes", "micro_batch"):
            text = str(item).strip()
            if isinstance(item, bool) or not text.isdigit():
                raise SpecError(f"{where}: {item!r} is not a whole number", hint="give whole numbers, comma-separated")
            value: Any = int(text)
            if axis == "zero" and value not in entry_choices()["zero"]:
                raise SpecError(f"{where}: ZeRO stage {value} does not exist", hint="ZeRO stages are 0, 1, 2, 3")
            if axis != "zero" and value < 1:
                raise SpecError(f"{where}: {value} must be at least 1")
        else:
            value = str(item).strip()
            if value not in entry_choices()[axis]:
                raise SpecError(f"{where}: {value!r} is not one of {', '.join(entry_choices()[axis])}")
        if value in out:  # the same point twice would run twice and count twice in the report
            raise SpecError(f"{where}: {value} is given twice", hint="give each value once")
        out.append(value)
    return out


def load_grid_file(path: str) -> Tuple[Dict[str, List[Any]], List[Dict[str, Any]]]:
    """A sweep file: axes (a list or one value each; their product is the grid) and/or `points:`,
    a list of single points added to it.

        zero: [0, 1, 2, 3]
        offload: none
        points:
          - {zero: 3, offload: optimizer}
    """
    import yaml

    from .paths import load_yaml, read_user_file

    try:
        data = load_yaml(read_user_file(Path(path))) or {}
    except OSError as exc:
        raise SpecError(f"--grid {path}: {exc.strerror or exc}", hint="give the path of a YAML sweep file") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise SpecError(f"--grid {path}: not valid YAML ({getattr(exc, 'problem', None) or exc})") from None
    if not isinstance(data, dict):
        raise SpecError(f"--grid {path}: must be a YAML mapping of axes ({', '.join(AXES)}) and/or points:")
    axes: Dict[str, List[Any]] = {}
    points: List[Dict[str, Any]] = []
    for key, value in data.items():
        name = _FILE_KEYS.get(str(key), str(key))
        if name == "points":
            if not isinstance(value, list) or not all(isinstance(p, dict) for p in value):
                raise SpecError(
                    f"--grid {path}: `points:` must be a list of mappings like {{zero: 3, offload: optimizer}}"
                )
            for i, p in enumerate(value, 1):
                point = {}
                for k, v in p.items():
                    axis = _FILE_KEYS.get(str(k), str(k))
                    if axis not in AXES:
                        raise SpecError(f"--grid {path}: point {i}: unknown key {k!r}", hint=f"keys: {', '.join(AXES)}")
                    vals = axis_values(axis, v, f"--grid {path}: point {i}: {axis}")
                    if len(vals) != 1:
                        raise SpecError(f"--grid {path}: point {i}: {axis} must be one value, not a list")
                    point[axis] = vals[0]
                points.append(point)
        elif name in AXES:
            axes[name] = axis_values(name, value, f"--grid {path}: {name}")
        else:
            raise SpecError(f"--grid {path}: unknown key {key!r}", hint=f"keys: {', '.join(AXES)}, points")
    return axes, points


def expand(
    axes: Dict[str, List[Any]], points: Sequence[Dict[str, Any]] = (), note: Callable[[str], Any] = lambda s: None
) -> List[Dict[str, Any]]:
    """The grid's points: the product of the axes (combinations that are no configuration, like
    ZeRO-0 with offload, are left out and said so), then the listed points (taking the axes' single
    values where they name none). A point given twice is refused."""
    out: List[Dict[str, Any]] = []
    names = [a for a in AXES if a in axes]
    if names and (not points or any(len(axes[a]) > 1 for a in names)):
        for combo in itertools.product(*(axes[a] for a in names)):
            point = dict(zip(names, combo))
            why = undefined(point)
            if why:
                note(f"left out {label(point)}: {why}")
                continue
            if point not in out:
                out.append(point)
    for i, given in enumerate(points, 1):
        point = {a: axes[a][0] for a in names if len(axes[a]) == 1}
        point.update(given)
        point = {a: point[a] for a in AXES if a in point}
        why = undefined(point)
        if why:
            raise SpecError(f"sweep point {i} ({label(point)}): {why}", hint="change or remove that point")
        if point in out:
            raise SpecError(
                f"sweep point {i} ({label(point)}) is already in the sweep",
                hint="remove it from points:, or drop its values from the axes",
            )
        out.append(point)
    if not out:
        raise SpecError("the sweep has no points", hint="give at least one axis, e.g. --zero 0,1,2,3, or a --grid file")
    return out


def with_point(args: Sequence[str], point: Dict[str, Any]) -> List[str]:
    """The training arguments with the point's flags in place of the same flags in `args`."""
    drop = {FLAGS[a] for a in point if a in FLAGS}
    out: List[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg in drop:
            skip = True
            continue
        if arg.split("=", 1)[0] in drop and "=" in arg:
            continue
        out.append(arg)
    for axis in AXES:
        if axis in point and axis in FLAGS:
            out += [FLAGS[axis], str(point[axis])]
    return out


# ---------------------------------------------------------------------------------------------
# the points as jobs, checked


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
    from . import site_rules

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
# submit and track


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
    poll: Backoff = POLL,
) -> List[Any]:
    """Until every job has ended: one scheduler query per cluster per poll, a line per job as it
    ends. Returns the records as they ended."""
    from .jobs import refresh
    from .states import JobState

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
