"""Commands about recorded jobs: logs, status, list, adopt, cancel, show, doctor, report."""

from __future__ import annotations

import sys
from typing import Any, List, Optional

import typer

from ..terminal import visible
from ..errors import HpcLaunchError
from .app import app, complete_jobs, print_json, print_table, say, show_jobs
from .declare import option


def _job_argument(help: str, metavar: str = "JOB_ID") -> Any:
    """The job a command is about: its id as submit printed it (completed from the records)."""
    return typer.Argument(..., metavar=metavar, help=help, autocompletion=complete_jobs)


@app.command()
def logs(
    job_id: str = _job_argument("job id (as printed by submit)"),
    follow_: bool = typer.Option(False, "--follow", "-f", help="follow until the job ends; exit with its exit code"),
    summary: bool = typer.Option(
        False, "--summary", "-s", help="the job's summary: state, time split, steps, loss, samples/s, memory, eval"
    ),
    show_all: bool = typer.Option(
        False, "--all", "-a", help="with -f: every line, the frameworks' chatter too (the log file always has it)"
    ),
    cluster: Optional[str] = option("cluster", "when the id exists on several clusters"),
) -> None:
    """Print (or follow) a job's log: NAME.oNNNN, or the site's own log name."""
    from .. import follow
    from ..jobs import array_tasks, lookup, recorded
    from ..records import JobStore

    store = JobStore()
    target = lookup(store, job_id, cluster)
    if target.group:
        if not follow_:
            raise HpcLaunchError(
                f"{job_id} is a sweep or job array of {len(target.records)} jobs",
                hint=f"`hpc-launch logs JOBID` for one of them (`hpc-launch status {job_id}` lists them), "
                "or -f to follow them all",
            )
        from ..sweep import watch

        ended = watch(store, target.records)
        raise typer.Exit(0 if all(r.state == "done" for r in ended) else 1)
    record = target.records[0]
    tasks = array_tasks(record)  # a user's `-J` array: each task writes its own log
    if follow_ and tasks:
        raise typer.Exit(follow.follow_array(record, recorded(store, tasks), store=store, show_all=show_all))
    if follow_:
        raise typer.Exit(follow.follow_chain(recorded(store, [record])[0], store=store, show_all=show_all))
    if tasks:
        for task in recorded(store, tasks) if summary else tasks:
            sys.stdout.write(f"==> {task.job_id}: {task.log_path} <==\n")
            try:
                text = _log_text(task, store, summary)
            except HpcLaunchError:
                text = "(no log yet)\n"
            sys.stdout.write(text if text.endswith("\n") or not text else text + "\n")
        return
    text = _log_text(record, store, summary)
    sys.stdout.write(text + "\n" if summary else text)  # the log itself is the job's own


def _log_text(record, store, summary: bool) -> str:
    from .. import follow
    from ..jobs import read_whole_log

    try:
        return visible(follow.summary_of(record, store)) if summary else read_whole_log(record)
    except FileNotFoundError:
        raise HpcLaunchError(
            f"the log {record.log_path} does not exist yet (job {record.state})",
            hint=f"`hpc-launch logs -f {record.job_id}` waits for it",
        ) from None


NOTIFY_LOOKBACK = 200  # `status` looks this far back for ended jobs with --notify messages still to send


@app.command()
def status(
    job_ids: List[str] = typer.Argument(
        None,
        metavar="JOB_ID...",
        help="job ids (default: all active jobs)",
        autocompletion=complete_jobs,
    ),
    cluster: Optional[str] = option("cluster", "only this cluster's jobs (or the ids on this cluster)"),
    json_: bool = typer.Option(False, "--json", help="a JSON list of jobs (keys: docs/commands.md)"),
) -> None:
    """Ask the schedulers (one query per cluster) and show the jobs' states."""
    from ..notify import relay as notify_relay
    from ..jobs import lookup, refresh
    from ..records import DamagedRecord, JobStore
    from ..states import JobState

    store = JobStore()
    problems: List = []
    records = []
    for j in job_ids or []:
        try:  # a sweep's or a job array's id stands for all its jobs
            records += lookup(store, j, cluster).records
        except DamagedRecord as damaged:
            if len(job_ids) == 1:
                raise
            problems.append(damaged)
    if not job_ids:
        records = store.list(cluster=cluster, active_only=True, on_damaged=problems.append)
        # and the ended jobs whose --notify messages are not all out yet: never lost silently
        recent = store.list(cluster=cluster, limit=NOTIFY_LOOKBACK)
        owed = [r for r in recent if JobState(r.state).terminal and notify_relay.wanted(r)]
        if owed:
            records = sorted(records + owed, key=lambda r: r.submit_time, reverse=True)
    show_jobs(refresh(store, records, on_unreached=problems.append), json_, starts=True)
    _warn(problems, fail=True)


def _warn(problems: List, fail: bool) -> None:
    """One line per job that could not be shown up to date (records.DamagedRecord, jobs.state.Unreached);
    with `fail`, exit with the worst of their codes once the others are shown."""
    for problem in problems:
        say(f"warning: {problem.one_line()}")
    if fail and problems:
        raise typer.Exit(max(p.exit_code for p in problems))


@app.command("list")
def list_jobs(
    cluster: Optional[str] = option("cluster", "only this cluster's jobs"),
    active: bool = typer.Option(False, "--active", help="only jobs not yet ended"),
    refresh_: bool = typer.Option(False, "--refresh", "-r", help="ask the schedulers first"),
    limit: int = typer.Option(50, "--limit", "-l", metavar="N", help="at most this many jobs, newest first"),
    json_: bool = typer.Option(False, "--json", help="a JSON list of jobs (keys: docs/commands.md)"),
) -> None:
    """The jobs hpc-launch has submitted, newest first."""
    from ..jobs import refresh, refresh_is_cheap
    from ..records import JobStore

    store = JobStore()
    damaged: List = []
    unreached: List = []
    records = store.list(cluster=cluster, active_only=active, limit=limit, on_damaged=damaged.append)
    # jobs on this machine with no scheduler cost one local `ps`: always show their real state
    asked = records if refresh_ else [r for r in records if refresh_is_cheap(r)]
    show_jobs(refresh(store, asked, keep=records, on_unreached=unreached.append), json_)
    _warn(damaged, fail=False)  # the records are what `list` shows: a damaged one is named, not a failure
    _warn(unreached, fail=True)


@app.command()
def adopt(
    job_id: str = typer.Argument(..., metavar="JOB_ID", help="the scheduler's job id"),
    cluster: str = option("cluster", "the profile it was submitted with", ...),
    workdir: str = typer.Option(
        ..., "--workdir", metavar="DIR", help="the job's work dir (absolute, on the host that submitted it)"
    ),
    name: str = typer.Option("train", "--name", "-N", metavar="NAME", help="the job's name"),
    script: str = typer.Option(
        "",
        "--script",
        metavar="FILE",
        help="the job script's path (its name tells this job's files from an earlier job's)",
    ),
    login: Optional[str] = typer.Option(None, "--login", metavar="HOST", help="the SSH alias it was submitted through"),
) -> None:
    """Record a job that exists but has no record (printed by submit when its store failed)."""
    from ..site import profiles
    from ..jobs import adopt as adopt_job
    from ..protocol import LOCAL_HOST, SCRIPT_DIR, is_local
    from ..records import JobStore

    record = adopt_job(
        JobStore(),
        profiles.load(cluster),
        job_id=job_id,
        host=LOCAL_HOST if is_local(login) else str(login),
        name=name,
        workdir=workdir,
        script_path=script or f"{workdir.rstrip('/')}/{SCRIPT_DIR}/{name}.sh",
    )
    sys.stderr.write(f"recorded {record.job_id} on {record.cluster}; log: {record.log_path}\n")


@app.command()
def cancel(
    job_id: str = _job_argument("job id, or a sweep's or a job array's id", "ID"),
    cluster: Optional[str] = option("cluster", "when the id exists on several clusters"),
) -> None:
    """Cancel a job (qdel / scancel / kill of the local job's process group) and report how it ended."""
    from ..jobs import cancel_ident
    from ..records import JobStore

    sys.stderr.write(visible("\n".join(cancel_ident(JobStore(), job_id, cluster))) + "\n")


@app.command()
def show(
    job_id: str = _job_argument("job id (as printed by submit)"),
    as_json: bool = typer.Option(False, "--json", help="everything recorded: the whole profile and every package"),
    cluster: Optional[str] = option("cluster", "when the id exists on several clusters"),
) -> None:
    """What was submitted (the code the job runs, its git state, the resolved profile) and what each start of the \
job found (Python, packages, modules)."""
    from ..capsule_read import as_json as capsule_json, describe
    from ..jobs import capsule_of, lookup
    from ..records import JobStore

    target = lookup(JobStore(), job_id, cluster)
    found = capsule_of(target.records[0])
    if as_json:
        print_json(capsule_json(found))
    else:
        sys.stdout.write("\n".join(describe(found)) + "\n")


@app.command()
def doctor(
    target: str = _job_argument("job id (as printed by submit), or the path of a log file", "JOB_ID|LOG"),
    cluster: Optional[str] = option("cluster", "when the id exists on several clusters"),
) -> None:
    """Name the cause and the fix of a failed job, from its log, the scheduler's word and its exit status.

    Exit 0 when it names a cause (or nothing failed), 1 when the failure is not one it knows."""
    from ..doctor import report_lines
    from ..jobs import examine

    diagnosis = examine(target, cluster, on_note=say)
    sys.stdout.write("\n".join(report_lines(diagnosis)) + "\n")
    raise typer.Exit(0 if diagnosis.found or diagnosis.succeeded else 1)


@app.command()
def report(
    job_ids: List[str] = _job_argument("job ids, job arrays' ids or sweep ids", "ID..."),
    out: Optional[str] = typer.Option(
        None, "--out", "-o", metavar="DIR", help="the report's folder (default: ./report-FIRST_ID)"
    ),
    cluster: Optional[str] = option("cluster", "when an id exists on several clusters"),
    plan_samples: Optional[int] = typer.Option(
        None,
        "--plan-samples",
        metavar="N",
        min=1,
        help="a planned training's total samples (e.g. 108000000 for 1.2M x 90 epochs): wall time and "
        "node-hours per node count in the scaling table",
    ),
    plan_steps: Optional[int] = typer.Option(
        None,
        "--plan-steps",
        metavar="N",
        min=1,
        help="a planned training's optimizer steps, times each node count's measured global batch",
    ),
    plan_epochs: Optional[int] = typer.Option(
        None,
        "--plan-epochs",
        metavar="N",
        min=1,
        help="a planned training's epochs, times each node count's recorded steps/epoch and global batch",
    ),
    queue: Optional[str] = option(
        "queue", "with a plan: the queue for its chain (default: the one `submit` picks for the proposed nodes)"
    ),
    link_walltime: Optional[str] = typer.Option(
        None,
        "--link-walltime",
        metavar="TIME",
        help="with a plan: each chain link's walltime (default: as long as the queue allows, split evenly)",
    ),
    min_efficiency: float = typer.Option(
        0.7,
        "--min-efficiency",
        metavar="F",
        help="the parallel-efficiency floor for the proposed node count (0 < F <= 1)",
    ),
) -> None:
    """Report finished jobs: a table (Markdown, CSV) and charts of throughput and memory per \
configuration; for one job also its loss and samples/s over steps (steps.png); for one \
configuration at several node counts a scaling table (scaling.csv, scaling.png), and for a \
planned training its wall time, node-hours, the chain it needs and its charge in the site's unit."""
    from ..report import report_jobs

    plan = _plan(plan_samples, plan_steps, plan_epochs, min_efficiency, queue, link_walltime)
    written, notes = report_jobs(job_ids, out, cluster, plan)
    for note in notes:
        say(note)
    say("report: " + ", ".join(written))


def _plan(
    samples: Optional[int],
    steps: Optional[int],
    epochs: Optional[int],
    min_efficiency: float,
    queue: Optional[str],
    link_walltime: Optional[str],
) -> Any:
    """report's planned training from its options; a usage error for a combination that says nothing."""
    from ..report import Plan
    from ..walltime import parse_walltime

    given = [n for n, v in (("samples", samples), ("steps", steps), ("epochs", epochs)) if v is not None]
    if len(given) > 1:
        raise typer.BadParameter(
            f"give one of --plan-samples, --plan-steps, --plan-epochs, "
            f"not both --plan-{given[0]} and --plan-{given[1]}",
            param_hint="--plan-*",
        )
    if not 0 < min_efficiency <= 1:
        raise typer.BadParameter(f"{min_efficiency} is not in (0, 1], e.g. 0.7", param_hint="--min-efficiency")
    if (queue is not None or link_walltime is not None) and not given:
        raise typer.BadParameter(
            "--queue and --link-walltime place a planned training: add --plan-samples, --plan-steps or --plan-epochs",
            param_hint="--queue/--link-walltime",
        )
    link_s = None
    if link_walltime is not None:
        try:
            link_s = parse_walltime(link_walltime)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--link-walltime") from None
    return Plan(
        samples=samples,
        steps=steps,
        epochs=epochs,
        min_efficiency=min_efficiency,
        queue=queue,
        link_walltime_s=link_s,
    )


@app.command()
def hosts(
    cluster: Optional[str] = option("cluster", "only this cluster's hosts"),
    forget: bool = typer.Option(
        False, "--forget", help="forget them (all, or the HOSTS named): later jobs may run there again"
    ),
    names: List[str] = typer.Argument(None, metavar="HOST...", help="with --forget: only these hosts"),
    json_: bool = typer.Option(
        False, "--json", help="the list as JSON (keys: cluster, host, reason, job_id, since, until)"
    ),
) -> None:
    """Hosts that jobs found bad (start-up check, watchdog, node failure), avoided until they expire."""
    import msgspec

    from ..records import JobStore

    store = JobStore()
    if forget:
        say(f"forgot {store.forget_bad_hosts(cluster, names or None)} host(s)")
        return
    found = store.bad_hosts(cluster)
    for b in store.malformed_bad_hosts(cluster):  # never avoided: named, so they can be cleared
        say(f"skipped a record of {b.cluster} that names no host: {b.host!r} (job {b.job_id}); --forget clears it")
    if json_:
        print_json([msgspec.structs.asdict(b) for b in found])
        return
    import time

    def when(t: float) -> str:
        return time.strftime("%m-%d %H:%M", time.localtime(t))

    print_table(
        ("cluster", "host", "why", "found by job", "since", "avoided until"),
        [(b.cluster, b.host, b.reason, b.job_id, when(b.since), when(b.until)) for b in found],
    )
