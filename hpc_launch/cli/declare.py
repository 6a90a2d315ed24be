"""Typer commands from the option table (hpc_launch/options.py): `@command("submit")` over a body
that takes the command's parameters by name (`**v`) gives it its typer options, each as its row
says (flags, metavar, help for this command, type, default, completion), in its help's order."""

from __future__ import annotations

import inspect
from typing import Any, Callable, List, Optional, TypeVar

import typer

from .. import options
from .app import GPU_COUNT, app, complete_clusters

Body = TypeVar("Body", bound=Callable[..., Any])
_TYPES = {"str": str, "int": int, "float": float, "gpus": int, "flag": bool, "argument": str}


def command(name: str) -> Callable[[Body], Body]:
    """Registers the body as the command `name`; its docstring is the command's help."""

    def register(body: Body) -> Body:
        params = [parameter(row, name) for row in options.of(name)]
        body.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        body.__annotations__ = {p.name: p.annotation for p in params}
        app.command(name=name)(body)
        return body

    return register


def parameter(row: options.Option, command: str) -> inspect.Parameter:
    """The row as typer reads a parameter: its annotation and its typer.Option (or Argument)."""
    help = row.help_in(command)
    kind = _TYPES[row.kind]
    annotation: Any = List[str] if row.many else (kind if row.default is not None else Optional[kind])
    if row.kind == "argument":
        annotation = str
        declared = typer.Argument(..., metavar=row.metavar, help=help)
    else:
        declared = option(row.key, help, list(row.default) if row.many else row.default)
    return inspect.Parameter(row.name, inspect.Parameter.KEYWORD_ONLY, default=declared, annotation=annotation)


def option(key: str, help: str, default: Any = None) -> Any:
    """The row `key` as a typer.Option with this help and default (`...`: required), for a command
    whose other parameters are its own (`status --cluster`, `plan --nodes`)."""
    row = options.ROWS[key]
    extra: dict = {}
    if row.kind == "gpus":
        extra["click_type"] = GPU_COUNT
    if row.complete:
        extra["autocompletion"] = complete_clusters
    return typer.Option(default, *row.flags, metavar=row.metavar, help=help, **extra)
