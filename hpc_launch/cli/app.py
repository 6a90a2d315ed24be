"""The typer apps, option parsing shared by commands, and tables of jobs.

Imports of anything heavier than typer happen inside the commands. `hpc-launch hostfile` inside
a job and `submit --dry-run` on a login node do not import this module at all when their command
line is well-formed (hpc_launch/cli/fast.py).
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator, List, NoReturn, Optional, Sequence

import typer

# the command modules import these from here too: one import line for what a command needs
from . import COMPLETE_VAR, option_values  # noqa: F401
from .option_values import OptionError, expand_hosts, split_list  # noqa: F401
from .printing import err, print_json, say  # noqa: F401

HELP_OPTIONS = {"help_option_names": ["-h", "--help"]}

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
# The conversions live in option_values (typer-free, shared with the fast path); here a bad value
# becomes typer's usage error, which names the option.


@contextmanager
def usage_errors() -> Iterator[None]:
    try:
        yield
    except OptionError as exc:
        raise typer.BadParameter(exc.message, param_hint=exc.param_hint) from None


def parse_env(pairs: Optional[List[str]]) -> Dict[str, str]:
    with usage_errors():
        return option_values.parse_env(pairs)


def split_args(value: Optional[str]) -> Optional[List[str]]:
    with usage_errors():
        return option_values.split_args(value)


def run_checked(read: Callable[[Dict[str, Any]], Callable[[], int]], values: Dict[str, Any]) -> NoReturn:
    """A command whose body lives in a typer-free module (the fast path calls the same `read`):
    check the options (a bad one is a usage error), then run it; its return is the exit code."""
    with usage_errors():
        action = read(values)
    raise typer.Exit(action())


# ---- printing ----------------------------------------------------------------------------------


def print_table(columns: Sequence[str], rows: Sequence[Sequence[str]], width: Optional[int] = None) -> None:
    from rich.console import Console
    from rich.table import Table

    from ..terminal import visible

    table = Table(box=None, pad_edge=False)
    for col in columns:
        table.add_column(col)
    for row in rows:  # a cell may quote a scheduler or a job: never terminal control (terminal.visible)
        table.add_row(*(visible(cell) for cell in row))
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
    seconds or null, and `pending_reason`), and where its --notify messages stand (a "notify"
    column when a job has them; JSON `notify`, null without --notify: notify_relay.as_json)."""
    from ..jobs.state import start_of, start_words
    from ..notify_relay import as_json as notify_json, words as notify_words

    if as_json:
        out = []
        for r in records:
            item = {key: getattr(r, key) for key in JOB_JSON_KEYS}
            if starts:
                item["estimated_start"], item["pending_reason"] = start_of(r)
                item["notify"] = notify_json(r)
            out.append(item)
        print_json(out)
        return
    import time

    notes = starts and any(notify_words(r) for r in records)
    rows = [
        (
            r.job_id,
            r.cluster,
            r.name,
            r.state,
            "" if r.exit_code is None else str(r.exit_code),
            time.strftime("%m-%d %H:%M:%S", time.localtime(r.submit_time)),
            *((start_words(r),) if starts else ()),
            *((notify_words(r),) if notes else ()),
            r.host,
            r.log_path,
            r.comment,
        )
        for r in records
    ]
    columns = ["job id", "cluster", "name", "state", "exit", "submitted", *(["starts"] if starts else [])]
    columns += ["notify"] if notes else []
    print_table(columns + ["host", "log", "scheduler says"], rows, width=200)
