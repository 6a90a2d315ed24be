"""Writes fast_spec.json: the options of the commands the fast path runs (cli/fast.py), read
from the typer commands themselves, which stay the one place options are declared. Run it after
changing an option of `submit` or `hostfile` (a fast test fails until you do):

    .venv/bin/python -m hpc_launch.cli.fast_spec

A command with anything the fast path's parser does not do (an argument, an environment variable
or callback behind an option, a prompt, a type other than str/int/float or an off flag) is written with
"fast": false and the reason; the fast path then leaves it to typer.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Dict, List, Optional

from .fast import FAST_COMMANDS, SPEC_FILE

REGENERATE = ".venv/bin/python -m hpc_launch.cli.fast_spec"
TYPES = ("str", "int", "float")  # the names of click's STRING, INT and FLOAT types


def build() -> Dict[str, Any]:
    from typer.main import get_command

    from . import _typer_app

    group = get_command(_typer_app())
    commands = {name: _command(group.commands[name]) for name in sorted(FAST_COMMANDS)}  # type: ignore[attr-defined]
    return {"generated_by": REGENERATE, "commands": commands}


def _command(cmd: Any) -> Dict[str, Any]:
    params: List[Dict[str, Any]] = []
    why_not = _unusual_command(cmd)
    for p in cmd.params:
        why_not = why_not or _unusual_param(p)
        params.append(
            {
                "name": p.name,
                "flags": list(p.opts),
                "takes_value": not p.is_flag,
                "multiple": bool(p.multiple),
                "type": p.type.name,
                "default": p.default if _is_json(p.default) else repr(p.default),
            }
        )
    return {"fast": not why_not, "why_not": why_not or "", "params": params}


def _unusual_command(cmd: Any) -> Optional[str]:
    if cmd.no_args_is_help:
        return "no_args_is_help"
    if cmd.allow_extra_args or cmd.ignore_unknown_options or cmd.context_settings.get("token_normalize_func"):
        return "extra arguments, unknown options or a token normaliser"
    return None


def _unusual_param(p: Any) -> Optional[str]:
    name = f"parameter {p.name}"
    if p.param_type_name != "option":
        return f"{name} is an argument"
    if p.envvar or p.callback or p.is_eager or p.required or p.prompt or p.count or not p.expose_value:
        return f"{name}: an envvar, callback, eager, required, prompt, count or unexposed option"
    if p.nargs != 1 or p.secondary_opts:
        return f"{name}: several values or a --no- form"
    if any(not (f.startswith("--") and len(f) > 2 or len(f) == 2 and f[0] == "-") for f in p.opts):
        return f"{name}: a flag that is neither --long nor -x"
    if p.is_flag:
        if p.default is not False or p.multiple:
            return f"{name}: a flag that is not off by default"
    elif p.type.name not in TYPES:
        return f"{name}: type {p.type.name}"
    if not _is_json(p.default):
        return f"{name}: default {p.default!r}"
    return None


def _is_json(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool)) or value == []


def text() -> str:
    return json.dumps(build(), indent=1, sort_keys=True) + "\n"


def main() -> None:
    with open(SPEC_FILE, "w", encoding="utf-8") as fh:
        fh.write(text())
    sys.stderr.write(f"wrote {SPEC_FILE}\n")


if __name__ == "__main__":
    main()
