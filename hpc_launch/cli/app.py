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
from typer.core import TyperGroup

# the command modules import these from here too: one import line for what a command needs
from . import COMPLETE_VAR, option_values  # noqa: F401
from .option_values import OptionError, expand_hosts, split_list  # noqa: F401
from .printing import err, print_json, say  # noqa: F401

HELP_OPTIONS = {"help_option_names": ["-h", "--help"]}

# `hpc-launch --help` lists the commands by use, in the order a newcomer meets them, one panel each
# (typer's rich_help_panel). Every command is named here: tests/test_cli_face.py checks it.
PANELS = (
    ("Run a job", ("submit", "sweep", "tune", "rerun")),
    ("Follow a job", ("status", "logs", "list", "show", "cancel", "doctor", "report", "hosts", "adopt")),
    ("Plan", ("where", "plan", "clusters", "completion")),
    ("Inside an allocation", ("alloc", "run")),
    ("Inside a job", ("hostfile", "announce")),
)
_ORDER = [name for _, names in PANELS for name in names]
_PANEL_OF = {name: panel for panel, names in PANELS for name in names}


class _ByUse(TyperGroup):
    """The root command group: its commands listed by use (PANELS), each in its panel."""

    def list_commands(self, ctx: Any) -> List[str]:
        names = super().list_commands(ctx)
        return sorted(names, key=lambda n: _ORDER.index(n) if n in _ORDER else len(_ORDER))

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        command: Any = super().get_command(ctx, cmd_name)  # a TyperCommand or TyperGroup: both have a panel
        if command is not None and cmd_name in _PANEL_OF:
            command.rich_help_panel = _PANEL_OF[cmd_name]
            if command.help:
                command.help = reflowed(command.help)
                command.short_help = command.short_help or summary(command.help)
        return command


def reflowed(text: str) -> str:
    """A docstring's paragraphs each on one line, for the terminal to wrap: typer's rich markup
    keeps the source's line breaks, so a narrow terminal broke every line twice."""
    import inspect

    return "\n\n".join(" ".join(p.split()) for p in inspect.cleandoc(text).split("\n\n"))


def summary(text: str, most: int = 90) -> str:
    """A command's line in `hpc-launch --help`: its help's first paragraph on one line (rich
    markup keeps the docstring's line breaks), cut before its details when it is long."""
    line = reflowed(text).split("\n\n")[0]
    if len(line) > most:
        cuts = [i for i in (line.find(sep) for sep in (": ", "; ", ". ")) if i >= 20]
        if cuts:
            line = line[: min(cuts)]
    return line


app = typer.Typer(
    cls=_ByUse,
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
    from ..site import profiles

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

try:  # typer 0.28 carries its own click
    from typer._click import types as _click_types
except ImportError:  # pragma: no cover - an older typer on the system click
    from click import types as _click_types  # type: ignore[no-redef]


class _GpuCount(_click_types.IntParamType):  # type: ignore[misc]
    """-g N: a whole number of GPUs. Grid Engine sites spell the group `qsub -g GROUP` (ABCI 2.0,
    TSUBAME 4.0), so a word there is most likely the group: say where it goes."""

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        try:
            return super().convert(value, param, ctx)
        except _click_types.BadParameter:
            self.fail(f"{value!r} is not a number of GPUs; a group or project goes to -P/--group", param, ctx)


GPU_COUNT = _GpuCount()
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


def print_table(
    columns: Sequence[str], rows: Sequence[Sequence[str]], width: Optional[int] = None, fit: Optional[str] = None
) -> None:
    """`fit`: one row per line on the terminal it is printed on: the column named `fit` is cut
    short (ending in "…") to make room, the others are kept whole."""
    from rich.console import Console
    from rich.table import Table

    from ..terminal import visible

    console = Console(width=width)
    table = Table(box=None, pad_edge=False)
    # a cell may quote a scheduler or a job: never terminal control (terminal.visible)
    rows = [[visible(cell) for cell in row] for row in rows]
    if fit is None:
        for col in columns:
            table.add_column(col)
    else:
        at = list(columns).index(fit)
        widths = [max([len(col)] + [len(str(row[i])) for row in rows]) for i, col in enumerate(columns)]
        room = max(len(fit), console.width - sum(w for i, w in enumerate(widths) if i != at) - 2 * (len(columns) - 1))
        rows = [[*row[:at], _cut(str(row[at]), room), *row[at + 1 :]] for row in rows]
        for i, col in enumerate(columns):
            table.add_column(col, no_wrap=True, width=min(widths[i], room) if i == at else widths[i])
    for row in rows:
        table.add_row(*row)
    console.print(table)


def _cut(text: str, room: int) -> str:
    return text if len(text) <= room else text[: room - 1] + "…"


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
    column when a job has them; JSON `notify`, null without --notify: notify/relay.as_json)."""
    from ..jobs.state import start_of, start_words
    from ..notify.relay import as_json as notify_json, words as notify_words

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
    columns += ["host", "log", "scheduler says"]
    if sys.stdout.isatty():
        print_table(columns, rows, width=200)
    else:  # a pipe or a file: one line per job, however long the scheduler's comment
        print_lines(columns, rows)


def print_lines(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """A table for a reader that is not a terminal: one line per row, columns padded to their
    widest cell and two spaces apart (as the terminal's table), a cell's line breaks as spaces; never
    terminal control (a cell may quote a scheduler or a job: terminal.visible)."""
    from ..terminal import visible

    cells = [[visible(" ".join(str(c).splitlines())) for c in row] for row in [columns, *rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    for row in cells:
        sys.stdout.write("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() + "\n")
