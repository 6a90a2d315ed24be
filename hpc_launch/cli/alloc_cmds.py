"""`alloc` and `run`: an interactive allocation and the trainings run inside it (jobs/alloc.py).

`alloc` takes `submit`'s options and checks (its signature is submit's, less what only a batch job
has), so a limit or a queue fallback cannot differ between the two."""

from __future__ import annotations

import inspect
import os
from typing import Any, Dict, List, Optional

import typer

from .app import app, complete_clusters, parse_env, say, split_args, usage_errors
from .submit_cmds import submit as _submit
from .submit_run import job_options

# submit's options that only a batch job has: a chain, following its log, the start-up gather,
# node-local staging, notifications, validation by the batch command
BATCH_ONLY = (
    "chain",
    "follow",
    "show_all",
    "gather",
    "spares",
    "failover",
    "stage_env",
    "stage_data",
    "no_stage",
    "notify",
    "no_check",
    "train_args",
    "script",
)
JOB_KEYS = (
    "cluster",
    "nodes",
    "gpus_per_node",
    "queue",
    "walltime",
    "group",
    "name",
    "modules",
    "env",
    "pass_env",
    "directive",
    "hosts",
    "workdir",
    "venv",
    "login",
    "exclude",
    "stop_before",
)


def alloc(**v: Any) -> None:
    """Get an interactive allocation with submit's options and limits, and open a shell in it.

    The scheduler's own command asks for it (salloc, qsub -I, qrsh): `hpc-launch run` there starts
    the training on its nodes with no new queue wait; leaving the shell ends the allocation."""
    from ..jobs.alloc import alloc_argv, interactive_spec, open_allocation, terminal_argv, wrapper_text
    from ..prepare import prepare
    from ..project_config import spec_for

    with usage_errors():
        given = {k: v[k] for k in JOB_KEYS}
        given["directives"] = given.pop("directive")
        options = job_options(**given)
    spec = interactive_spec(spec_for(v["config"], options), v["profile"])
    prepared = prepare(spec, profile_file=v["profile"], note=say)  # every limit checked here, before the scheduler
    if v["dry_run"]:
        import shlex
        import sys

        workdir = prepared.job.workdir
        sys.stdout.write(wrapper_text(prepared, workdir, prepared.script_path + ".alloc-id"))
        argv = terminal_argv(alloc_argv(prepared, prepared.script_path), prepared.host, workdir)
        sys.stderr.write(f"# script: {prepared.script_path}\n# allocation: {shlex.join(argv)}\n")
        raise typer.Exit(0)
    raise typer.Exit(
        open_allocation(
            prepared,
            {"job": options, "profile_files": list(v["profile"])},
            shell=not v["no_shell"],
            say=say,
        )
    )


def _alloc_signature() -> None:
    """alloc's parameters: submit's (the same typer options, help and checks), less BATCH_ONLY,
    and --no-shell."""
    params = [p for name, p in inspect.signature(_submit).parameters.items() if name not in BATCH_ONLY]
    no_shell = inspect.Parameter(
        "no_shell",
        inspect.Parameter.KEYWORD_ONLY,
        default=typer.Option(
            False,
            "--no-shell",
            help="hold the allocation in a detached tmux session and return; attach to it later",
        ),
        annotation=bool,
    )
    params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in params] + [no_shell]
    alloc.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    alloc.__annotations__ = {p.name: p.annotation for p in params}


_alloc_signature()
app.command(name="alloc")(alloc)


@app.command(name="run")
def run(
    script: Optional[str] = typer.Option(
        None, "--script", metavar="FILE", help="your own training script instead of `python -m hpc_launch.train`"
    ),
    train_args: Optional[str] = typer.Option(
        None, "--train-args", metavar="'ARGS'", help="arguments for the training entrypoint, as one shell-quoted string"
    ),
    env: List[str] = typer.Option(
        [], "--env", "-e", metavar="NAME=VALUE", help="NAME=VALUE exported for this run (repeatable)"
    ),
    name: Optional[str] = typer.Option(
        None, "--name", "-N", metavar="NAME", help="the run's name (default: the allocation's, -run1, -run2, ...)"
    ),
    cluster: Optional[str] = typer.Option(
        None,
        "--cluster",
        "-c",
        metavar="NAME",
        autocompletion=complete_clusters,
        help="the cluster profile, for an allocation hpc-launch did not open (your own salloc)",
    ),
    config: Optional[str] = typer.Option(
        None, "--config", metavar="FILE", help="project config file (default: ./hpc-launch.yaml if present)"
    ),
    detach: bool = typer.Option(False, "--detach", help="start the run and return (follow it with `logs -f`)"),
    show_all: bool = typer.Option(
        False, "--all", "-a", help="every line, the frameworks' chatter too (the log file always has it)"
    ),
) -> None:
    """Inside an allocation, start the training on its nodes now, with no new queue wait.

    The allocation is `hpc-launch alloc`'s or the scheduler's own; the site's launcher starts the
    ranks and the run is followed to its end. Each run is recorded with its own log (`list`,
    `logs`, `doctor`)."""
    from ..errors import SpecError
    from ..jobs.alloc import allocation_record, detect, follow_run, next_run_name, run_options, scheduler_env_hint
    from ..prepare import prepare
    from ..project_config import spec_for
    from ..records import JobStore

    inside = detect(os.environ)
    if inside is None:
        raise SpecError("not inside an allocation", hint=scheduler_env_hint())
    store = JobStore()
    alloc_rec = allocation_record(store, inside, cluster)
    if alloc_rec is None and not cluster:
        raise SpecError(
            f"allocation {inside.job_id} (from ${inside.source}) was not opened by `hpc-launch alloc`",
            hint="name its cluster profile: hpc-launch run --cluster NAME",
        )
    given: Dict[str, Any] = {"script": script, "env": parse_env(env), "train_args": split_args(train_args)}
    given["name"] = name or next_run_name(store, alloc_rec.name if alloc_rec else "run", inside.job_id)
    options = run_options(alloc_rec, given, cluster)
    profile_files = ((alloc_rec.extra or {}).get("alloc") or {}).get("profile_files") if alloc_rec else None
    spec = spec_for(config, options)
    prepared = prepare(spec, profile_file=profile_files or [], note=say)
    from ..jobs.alloc import start_run

    record = start_run(prepared, inside, store=store)
    say(f"run {record.name} started as {record.job_id} in allocation {inside.job_id}; log: {record.log_path}")
    if detach:
        raise typer.Exit(0)
    raise typer.Exit(follow_run(record, show_all=show_all))
