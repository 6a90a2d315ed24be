"""The fast path: `hpc-launch hostfile ...` and `hpc-launch submit ... --dry-run` without typer.

`hostfile` runs inside every job on every node, and `submit --dry-run` is how a user checks a
script; typer, click and rich cost more start-up than the work itself (docs/launch-cost.md). A
well-formed command line is parsed here, driven by the option table the typer commands are built
from too (hpc_launch/options.py: each option's flags, type and default), and handed to the same
typer-free `read_*` function the typer command calls. Anything this parser does not fully understand (an
unknown or misspelled option, --help, bundled short flags, an argument, a value its type refuses,
a bad option value, shell completion) goes to typer instead, which gives its usual answer: the
two paths differ in speed only. tests/test_cli_fast.py runs a table of command lines through both.
"""

from __future__ import annotations

import errno
import os
import sys
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional

from . import COMPLETE_VAR, Runner

if TYPE_CHECKING:
    from ..options import Option

# command -> the flag that must be set for the fast path to take it (None: any command line). A
# real submit talks to a scheduler or over SSH, where typer's start-up is noise: only its dry-run.
FAST_COMMANDS: Dict[str, Optional[str]] = {"hostfile": None, "submit": "dry_run"}


class Aborted(Exception):
    """typer's Abort on the fast path (end of input while a command reads stdin): main says "aborted"."""


def fast_runner(args: List[str]) -> Optional[Runner]:
    """What main() runs for `args` without typer, or None: typer must parse them."""
    if not args or args[0] not in FAST_COMMANDS or os.environ.get(COMPLETE_VAR):
        return None
    from .. import options

    values = parse(list(options.of(args[0])), args[1:])
    needed = FAST_COMMANDS[args[0]]
    if values is None or (needed and not values[needed]):
        return None
    try:
        action = _reader(args[0])(values)
    except Exception:  # a bad value (OptionError) or any other surprise: typer runs it and says so
        return None
    return (lambda: run_like_typer(action)), None, Aborted


def _reader(command: str) -> Callable[[Dict[str, Any]], Callable[[], int]]:
    if command == "submit":
        from .submit_run import read_submit

        return read_submit
    from .hostfile_run import read_hostfile

    return read_hostfile


def parse(params: List["Option"], tokens: List[str]) -> Optional[Dict[str, Any]]:
    """The command's parameters by name, as typer would pass them, or None where typer must decide.
    Follows click's parser: `--opt value`, `--opt=value`, `-o value`, `-ovalue`; an option that
    takes a value takes the next token whatever it is; `--` ends the options; repeats: last wins,
    or all, in order, for a repeatable option."""
    if any(p.kind not in KINDS for p in params):
        return None  # an argument: typer's
    by_flag = {flag: p for p in params for flag in p.flags}
    values: Dict[str, Any] = {p.name: (list(p.default) if p.many else p.default) for p in params}
    given: set = set()
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if token == "--":
            if i < len(tokens):
                return None  # arguments: these commands take none, typer says so
            break
        if token.startswith("--"):
            flag, eq, rest = token.partition("=")
            attached: Optional[str] = rest if eq else None
        elif token.startswith("-") and len(token) > 1:
            flag, attached = token[:2], (token[2:] or None)
        else:
            return None  # an argument
        p = by_flag.get(flag)
        if p is None:
            return None  # unknown, misspelled, -h/--help
        if not p.takes_value:
            if attached is not None:
                return None  # `--flag=x`, or short flags bundled (`-fa`)
            values[p.name] = True
            continue
        if attached is None:
            if i == len(tokens):
                return None  # the value is missing
            attached = tokens[i]
            i += 1
        value = KINDS[p.kind](attached)
        if value is None:
            return None
        if p.many:
            if p.name not in given:
                values[p.name] = []
            values[p.name].append(value)
        else:
            values[p.name] = value
        given.add(p.name)
    return values


def _number(kind: Callable[[str], Any]) -> Callable[[str], Any]:
    def convert(text: str) -> Any:
        try:
            return kind(text)
        except ValueError:
            return None  # typer must say why not

    return convert


# a row's kind -> the text as click's types convert it (`int(text)`, `float(text)`); None: typer decides
KINDS: Dict[str, Callable[[str], Any]] = {
    "str": str,
    "int": _number(int),
    "gpus": _number(int),
    "float": _number(float),
    "flag": str,
}


def run_like_typer(action: Callable[[], int]) -> int:
    """What typer's `_main` does around a command (typer/core.py), so both paths end alike."""
    try:
        return action()
    except EOFError as exc:
        sys.stderr.write("\n")
        raise Aborted() from exc
    except KeyboardInterrupt:
        return 130  # typer: Exit(130)
    except OSError as exc:
        if exc.errno != errno.EPIPE:
            raise
        # a reader went away (`| head`): exit 1, and no "Exception ignored" when Python flushes at exit
        sys.stdout = _QuietFlush(sys.stdout)  # type: ignore[assignment]
        sys.stderr = _QuietFlush(sys.stderr)  # type: ignore[assignment]
        sys.exit(1)


class _QuietFlush:
    """click's PacifyFlushWrapper: a flush into a closed pipe is ignored."""

    def __init__(self, wrapped: Any) -> None:
        self.wrapped = wrapped

    def flush(self) -> None:
        try:
            self.wrapped.flush()
        except OSError as exc:
            if exc.errno != errno.EPIPE:
                raise

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.wrapped, attr)
