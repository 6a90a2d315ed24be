"""The one sanitiser at the display boundary: what hpc-launch prints in its own lines (a
scheduler's words, a job's bad-host reason, a summary) never reaches the terminal as control.
Standard library only and tiny: the typer-free fast path (cli/fast.py) prints through it."""

from __future__ import annotations

import re

# Terminal control: C0 (ESC starts CSI/OSC sequences that recolour, retitle, hide or rewrite the
# screen; CR overwrites a line), DEL and C1 (0x9b is a one-byte CSI). Text from a scheduler, a
# job's report or a log that hpc-launch prints in its own lines shows them as visible escapes.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def visible(text: str) -> str:
    """`text` safe for a terminal: every control character but newline and tab as `\\xNN`."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)
