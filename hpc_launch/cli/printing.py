"""How a command speaks: a line for the user on stderr, an error line, JSON on stdout. No typer,
so the fast path (hpc_launch/cli/fast.py) prints exactly what the typer commands print."""

from __future__ import annotations

import sys
from typing import Any

from ..terminal import visible


def say(line: str) -> None:
    """A line for the user, on stderr (stdout carries only what scripts read: ids, scripts, JSON).
    What it quotes (a scheduler's words, a job's report) never reaches the terminal as control."""
    sys.stderr.write(f"hpc-launch: {visible(line)}\n")


def err(message: str) -> None:
    sys.stderr.write(f"hpc-launch: error: {visible(message)}\n")


def print_json(value: Any) -> None:
    import json

    sys.stdout.write(json.dumps(value, indent=1) + "\n")
