"""The typer apps, option parsing shared by commands, and how results are printed.

Imports of anything heavier than typer happen inside the commands, so `hpc-launch hostfile`
inside a job and `submit --dry-run` on a login node start fast.
"""

from __future__ import annotations

import shlex
import sys
from typing import Any, Dict, List, Optional, Sequence

import typer

HELP_OPTIONS = {"help_option_names": ["-h", "--help"]}
COMPLETE_VAR = "_HPC_LAUNCH_COMPLETE"  # the shell's completion function calls us back with it set

app = typer.Typer(
    add_completion=False,  # `hpc-launch completion SHELL` instead: no extra options on every command
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings=HELP_OPTIONS,
    help="Render, submit and follow DeepSpeed jobs on named clusters (ABCI, Miyabi, Polaris, Slurm, pods, local).",
)
clusters_app = typer.Typer(
    help="List the known clusters, or show one resolved.", invoke_without_command=True, context_settings=HELP_OPTIONS
)
app.add_typer(clusters_app, name="clusters")


def complete_clusters(incomplete: str) -> List[str]:
    from .. import profiles

    return [name for name in profiles.available() if name.startswith(incomplete)]


def complete_jobs(incomplete: str) -> List[str]:
    from ..records import JobStore

    return [r.job_id for r in JobStore().list(limit=200) if r.job_id.startswith(incomplete)]


def _version(value: bool) -> None:
    if value:
        from .. import __version__

        sys.stdout.write(f"hpc-launch {__version__}\n")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", "-V", callback=_version, is_eager=True, help="print the version and exit"
    ),
) -> None:
    """Render, submit and follow DeepSpeed jobs on named clusters (ABCI, Miyabi, Polaris, Slurm, pods, local)."""


# ---- reading options ---------------------------------------------------------------------------


def parse_env(pairs: Optional[List[str]]) -> Dict[str, str]:
    env = {}
    for pair in pairs or []:
        if "=" not in pair:
            raise typer.BadParameter(f"{pair!r} is not NAME=VALUE", param_hint="--env")
        key, value = pair.split("=", 1)
        env[key] = value
    return env


def split_list(value: Optional[str]) -> Optional[List[str]]:
    if value is None:
        return None
    return [v for v in (x.strip() for x in value.split(",")) if v]


def split_args(value: Optional[str]) -> Optional[List[str]]:
    if value is None:
        return None
    try:
        return shlex.split(value)
    except ValueError as exc:  # "No closing quotation"
        raise typer.BadParameter(
            f"{exc} in {value!r}: quote it as one shell word list, e.g. --train-args \"--note 'a b'\"",
            param_hint="--train-args",
        ) from None


def expand_hosts(value: Optional[str]) -> Optional[List[str]]:
    if value is None:
        return None
    from ..nodelist import expand_slurm_nodelist

    return expand_slurm_nodelist(value)


# ---- printing ----------------------------------------------------------------------------------


def say(line: str) -> None:
    """A line for the user, on stderr (stdout carries only what scripts read: ids, scripts, JSON)."""
    sys.stderr.write(f"hpc-launch: {line}\n")


def err(message: str) -> None:
    sys.stderr.write(f"hpc-launch: error: {message}\n")


def print_json(value: Any) -> None:
    import json

    sys.stdout.write(json.dumps(value, indent=1) + "\n")


def print_table(columns: Sequence[str], rows: Sequence[Sequence[str]], width: Optional[int] = None) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(box=None, pad_edge=False)
    for col in columns:
        table.add_column(col)
    for row in rows:
        table.add_row(*row)
    Console(width=width).print(table)


# Stable keys of `list --json` / `status --json` (documented in docs/commands.md): add, never rename.
JOB_JSON_KEYS = (
    "job_id",
    "cluster",
    "name",
    "state",
    "exit_code",
    "comment",
    "submit_time",
    "end_time",
    "host",
    "workdir",
    "log_path",
    "script_path",
    "dialect",
)


def show_jobs(records: Sequence[Any], as_json: bool, starts: bool = False) -> None:
    """The jobs as a table or JSON; `starts` (status): a queued job's start estimate and why it
    waits, as the scheduler said at this refresh (a "starts" column; JSON `estimated_start`, epoch
    seconds or null, and `pending_reason`)."""
    from ..jobs.state import start_of, start_words

    if as_json:
        out = []
        for r in records:
            item = {key: getattr(r, key) for key in JOB_JSON_KEYS}
            if starts:
                item["estimated_start"], item["pending_reason"] = start_of(r)
            out.append(item)
        print_json(out)
        return
    import time

    rows = [
        (
            r.job_id,
            r.cluster,
            r.name,
            r.state,
            "" if r.exit_code is None else str(r.exit_code),
            time.strftime("%m-%d %H:%M:%S", time.localtime(r.submit_time)),
            *((start_words(r),) if starts else ()),
            r.host,
            r.log_path,
            r.comment,
        )
        for r in records
    ]
    columns = ["job id", "cluster", "name", "state", "exit", "submitted", *(["starts"] if starts else [])]
    print_table(columns + ["host", "log", "scheduler says"], rows, width=200)
