"""`submit`, `sweep`, `tune`, `rerun` and `where`: options in, one call to the core, the job id (or sweep id)
out. Their options are rows of hpc_launch/options.py; `submit`'s body is in submit_run.py, which the fast
path (fast.py) calls too."""

from __future__ import annotations

import sys
from typing import Any, Dict, List

import typer

from ..protocol import EXIT_SIGINT
from .app import run_checked, say, split_list, usage_errors
from .declare import command
from .submit_run import Announcer, job_values, read_submit, show_dry_run


def _job_values(command: str, v: Dict[str, Any]) -> Dict[str, Any]:
    with usage_errors():
        return job_values(command, v)


@command("submit")
def submit(**v: Any) -> None:
    """Render the job script for a cluster and submit it (or print it with --dry-run)."""
    run_checked(read_submit, v)


@command("sweep")
def sweep(**v: Any) -> None:
    """Run a grid of DeepSpeed configurations (ZeRO stage, offload, precision, nodes, micro-batch) and report them.

    Every point is checked first (batch arithmetic, DeepSpeed's config validator, plan's memory
    estimators); one impossible point refuses the sweep. Submits one job array where the scheduler
    has arrays and all points ask for the same nodes, else one job per point; waits for all; writes
    report.md, report.csv, throughput.png and memory.png."""
    from .. import sweep as sw
    from ..project_config import spec_for

    axes: dict = {}
    points: list = []
    if v["grid"]:
        axes, points = sw.load_grid_file(v["grid"])
    for axis in ("zero", "offload", "precision", "nodes", "micro_batch"):
        if v[axis] is not None:
            axes[axis] = sw.axis_values(axis, v[axis], f"--{axis.replace('_', '-')}")
    values = sw.expand(axes, points, note=say)
    spec = spec_for(v["config"], _job_values("sweep", v))
    ui = _run_ui(sw)
    try:
        code = sw.run(
            spec,
            values,
            ui,
            profile_file=v["profile"],
            separate=v["separate"],
            out=v["out"],
            no_wait=v["no_wait"],
            dry_run=v["dry_run"],
            pack=v["pack"],
            resume=v["resume"],
        )
    except KeyboardInterrupt:
        raise typer.Exit(EXIT_SIGINT) from None
    raise typer.Exit(code)


@command("tune")
def tune(**v: Any) -> None:
    """Find the largest micro-batch that fits per ZeRO stage / offload, then the fastest, inside ONE job.

    Bisection on out of memory for each choice (at most log2(HIGH-LOW)+2 trials), every trial a row
    of the report (out-of-memory ones with state oom); writes tune.md, ds_config.json (the winner's
    DeepSpeed config) and the `hpc-launch submit` line that uses it (docs/tune.md)."""
    from .. import sweep as sw
    from .. import tune as tn
    from ..project_config import spec_for

    spec = spec_for(v["config"], _job_values("tune", v))
    tp = tn.plan(
        spec,
        sw.axis_values("zero", v["zero"], "--zero"),
        sw.axis_values("offload", v["offload"], "--offload"),
        tn.parse_range(v["micro_batch"]),
        mem_limit_gb=v["mem_limit"],
        profile_file=v["profile"],
        resume=v["resume"],
    )
    ui = _run_ui(sw)
    try:
        code = tn.run(tp, spec, ui, out=v["out"], dry_run=v["dry_run"])
    except KeyboardInterrupt:
        raise typer.Exit(EXIT_SIGINT) from None
    raise typer.Exit(code)


@command("rerun")
def rerun(**v: Any) -> None:
    """Submit a job's training again, from its capsule, on another cluster (or the same): its code, training \
arguments, nodes and walltime; modules, venv, queue and group from the new cluster's profile and your options."""
    from ..jobs import RerunUI, rerun as rerun_job
    from ..records import JobStore

    announce = Announcer()
    options = _job_values("rerun", v)
    try:
        rerun_job(
            JobStore(),
            v["job_id"],
            options,
            RerunUI(say=say, dry_run=show_dry_run, on_recorded=announce),
            from_cluster=v["from_cluster"],
            profile_file=v["profile"],
            dry_run=v["dry_run"],
        )
    except KeyboardInterrupt:
        raise typer.Exit(announce.interrupted()) from None


@command("where")
def where(**v: Any) -> None:
    """When and where the same job would start on each cluster, WITHOUT submitting: the queue, its \
limits, the scheduler's estimate where it gives one before submitting (Slurm's sbatch --test-only), \
or why a cluster refuses the job. Nothing is submitted, recorded or left behind. With --submit: \
the job goes to each cluster, the first to start trains and the others are cancelled (one copy)."""
    from ..jobs import where as where_job, where_line
    from ..project_config import spec_for
    from .app import print_json

    options = _job_values("where", v)
    config, profile = v["config"], v["profile"]
    clusters = [c for item in v["cluster"] for c in split_list(item) or []]
    if not clusters:
        clusters = [spec_for(config, dict(options, cluster=None)).cluster or "local"]

    def spec_of(cluster: str) -> Any:
        return spec_for(config, dict(options, cluster=cluster))

    if v["submit_first"]:
        raise typer.Exit(_first_start(clusters, spec_of, profile, v["no_wait"]))
    answers = where_job(clusters, spec_of, profile_file=profile, note=say)
    if v["as_json"]:
        print_json([a.as_dict() for a in answers])
    else:
        width = max(len(a.cluster) for a in answers)
        for a in answers:
            print(where_line(a, width))
    if not any(a.estimate for a in answers):  # no cluster takes the job: 3 if one could not be asked
        raise typer.Exit(3 if any(a.error for a in answers) else 2)


def _run_ui(sw: Any) -> Any:
    """sweep's and tune's: their id on stdout the moment it is known, progress on stderr."""

    def announce_id(ident: str) -> None:
        sys.stdout.write(ident + "\n")
        sys.stdout.flush()

    return sw.Run(
        say=say, line=lambda text: sys.stderr.write(text + "\n"), announce_id=announce_id, show_script=sys.stdout.write
    )


def _first_start(clusters: List[str], spec_of, profile: List[str], no_wait: bool) -> int:
    """`where --submit`: the group id on stdout, each cluster's job (or refusal) and the outcome on stderr."""
    from ..jobs.first_start import Interrupted, run

    group = ""

    def submitted(ident: str, entrants) -> None:
        nonlocal group
        group = ident
        print(ident, flush=True)
        for e in entrants:
            say(f"{e.cluster}: job {e.record.job_id}" if e.record else f"{e.cluster}: not submitted: {e.refused}")

    try:
        _, _, winner = run(clusters, spec_of, profile_file=profile, wait=not no_wait, note=say, on_submitted=submitted)
    except Interrupted as stopped:
        if not stopped.submitted:
            say("interrupted: nothing was submitted or recorded")
            return EXIT_SIGINT
        submitted(stopped.group, stopped.submitted)
        say(
            f"interrupted: nothing more is submitted; the {len(stopped.submitted)} job(s) of {stopped.group} above "
            f"stay queued and the first to start trains (its gate stops the others). `hpc-launch status "
            f"{stopped.group}` shows them, `hpc-launch cancel {stopped.group}` ends them"
        )
        return EXIT_SIGINT
    except KeyboardInterrupt:
        if group:
            say(
                f"interrupted: the jobs of {group} stay queued and the first to start trains (its gate stops "
                f"the others). `hpc-launch status {group}` shows them, `hpc-launch cancel {group}` ends them"
            )
        return EXIT_SIGINT
    if no_wait:
        return 0
    if winner is None:
        say(f"no job of {group} started its training: `hpc-launch status {group}` says how each ended")
        return 1
    say(f"follow it: hpc-launch logs -f {winner.job_id} --cluster {winner.cluster}")
    return 0
