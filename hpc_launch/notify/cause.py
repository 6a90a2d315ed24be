"""A failed job's notification carries doctor's cause and fix, diagnosed by the job itself from its
own log as it ends (the laptop that would run `hpc-launch doctor` may be off).

`cause_lines` runs the diagnosis as a child process (`python -m hpc_launch.notify.cause LOG RC`)
with a time limit, so a huge log or a slow filesystem costs the job at most that long and never
its exit code; any failure gives no lines, and the message keeps its `next: hpc-launch doctor ID`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import List, Optional

TIMEOUT_S = 15.0
HEAD_BYTES = 1 << 20  # doctor reads from the top (the first rank to fail says it first) ...
TAIL_BYTES = 3 << 20  # ... and the end says how it ended: a long log keeps both, not its middle


def _read_bounded(path: str) -> str:
    from .. import paths  # the package's own, standard library only

    # a FIFO or a device where the log should be is refused at once, never waited on
    with os.fdopen(paths.open_regular(path), "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size <= HEAD_BYTES + TAIL_BYTES:
            data = fh.read()
        else:
            data = fh.read(HEAD_BYTES)
            fh.seek(size - TAIL_BYTES)
            data += b"\n" + fh.read()
    return data.decode("utf-8", "replace")


def diagnosis_lines(log_path: str, rc: int) -> List[str]:
    """`cause: ...` and `fix: ...` for the job whose log is `log_path` (the live copy while a site's
    own log appears only at the end), or [] when doctor recognises nothing."""
    from .. import doctor
    from ..protocol import live_log_for

    live = live_log_for(log_path)
    text = _read_bounded(live if os.path.exists(live) else log_path)
    d = doctor.diagnose(text, exit_code=rc, state="failed")
    top = d.top
    return [f"cause: {top.text}", f"fix: {top.fix}"] if top else []


def cause_lines(log_path: str, rc: int, timeout: float = TIMEOUT_S) -> List[str]:
    try:
        r = subprocess.run(
            [sys.executable, "-m", "hpc_launch.notify.cause", log_path, str(rc)],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd="/",  # the job's own dir could hold a module named like one of ours
        )
    except (OSError, subprocess.SubprocessError):
        return []
    lines = [line for line in r.stdout.splitlines() if line.startswith(("cause: ", "fix: "))]
    return lines if r.returncode == 0 else []


def main(argv: Optional[List[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    try:
        for line in diagnosis_lines(args[0], int(args[1])):
            print(line)
    except Exception:  # noqa: BLE001 - no lines is the answer: the message says `next: hpc-launch doctor`
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
