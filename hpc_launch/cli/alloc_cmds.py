"""`alloc` and `run`: an interactive allocation and the trainings run inside it (jobs/alloc.py).

`alloc` takes `submit`'s options and checks (its rows are submit's, less what only a batch job
has: options.BATCH_ONLY), so a limit or a queue fallback cannot differ between the two."""

from __future__ import annotations

import os
from typing import Any, Dict

import typer

from .app import parse_env, say, split_args, usage_errors
from .declare import command
from .submit_run import job_values


@command("alloc")
def alloc(**v: Any) -> None:
    """Get an interactive allocation with submit's options and limits, and open a shell in it.

    The scheduler's own command asks for it (salloc, qsub -I, qrsh): `hpc-launch run` there starts
    the training on its nodes with no new queue wait; leaving the shell ends the allocation."""
    from ..jobs.alloc import alloc_argv, interactive_spec, open_allocation, terminal_argv, wrapper_text
    from ..prepare import prepare
    from ..project_config import spec_for

    with usage_errors():
        options = job_values("alloc", v)
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


@command("run")
def run(**v: Any) -> None:
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
    cluster = v["cluster"]
    alloc_rec = allocation_record(store, inside, cluster)
    if alloc_rec is None and not cluster:
        raise SpecError(
            f"allocation {inside.job_id} (from ${inside.source}) was not opened by `hpc-launch alloc`",
            hint="name its cluster profile: hpc-launch run --cluster NAME",
        )
    given: Dict[str, Any] = {"script": v["script"], "env": parse_env(v["env"])}
    given["train_args"] = split_args(v["train_args"])
    given["name"] = v["name"] or next_run_name(store, alloc_rec.name if alloc_rec else "run", inside.job_id)
    options = run_options(alloc_rec, given, cluster)
    profile_files = ((alloc_rec.extra or {}).get("alloc") or {}).get("profile_files") if alloc_rec else None
    spec = spec_for(v["config"], options)
    prepared = prepare(spec, profile_file=profile_files or [], note=say)
    from ..jobs.alloc import start_run

    record = start_run(prepared, inside, store=store)
    say(f"run {record.name} started as {record.job_id} in allocation {inside.job_id}; log: {record.log_path}")
    if v["detach"]:
        raise typer.Exit(0)
    raise typer.Exit(follow_run(record, show_all=v["show_all"]))
