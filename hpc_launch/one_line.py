"""A line from a rank, in one write.

Ranks run under `python -u`, where print() writes its text and then its newline: two write(2)s. A
launcher that merges the ranks' output (mpirun, srun, pdsh) can put another rank's line between
them (seen under Open MPI: rank 1's line glued to the end of rank 0's watchdog note, and the test
reading the log found one rank). Standard library only: it runs in every rank."""

from __future__ import annotations

import os
import sys
from typing import TextIO

OURS = "[hpc-launch] "


def say(line: str, stream: TextIO | None = None) -> None:
    """`line` and its newline on `stream` (stderr by default) in one write, after what it holds."""
    out = sys.stderr if stream is None else stream
    try:
        fd = out.fileno()
    except (AttributeError, OSError, ValueError):  # a stream without a descriptor (a test's capture)
        out.write(line + "\n")
        out.flush()
        return
    try:
        out.flush()
    except (OSError, RuntimeError, ValueError):  # reentrant: a signal handler inside a write
        pass
    data = (line + "\n").encode(getattr(out, "encoding", None) or "utf-8", errors="replace")
    while data:
        data = data[os.write(fd, data) :]


def say_ours(line: str) -> None:
    """One of hpc-launch's own lines (`[hpc-launch] ...`) on stderr."""
    say(OURS + line)
