"""How a command speaks: a line for the user on stderr, an error line, JSON on stdout. No typer,
so the fast path (hpc_launch/cli/fast.py) prints exactly what the typer commands print."""

from __future__ import annotations

import sys
from typing import Any


def say(line: str) -> None:
    """A line for the user, on stderr (stdout carries only what scripts read: ids, scripts, JSON)."""
    sys.stderr.write(f"hpc-launch: {line}\n")


def err(message: str) -> None:
    sys.stderr.write(f"hpc-launch: error: {message}\n")


def print_json(value: Any) -> None:
    import json

    sys.stdout.write(json.dumps(value, indent=1) + "\n")
