"""DeepSpeed's own single-node launcher (`deepspeed.launcher.launch`, what `deepspeed --num_gpus N`
runs), ended the moment it returns.

It returns only when every rank exited 0 (a failing rank makes it exit through sys.exit with the
rank's code, untouched here). By then it has slept a second after seeing the last rank end, and
the interpreter's teardown with torch loaded costs another ~0.5 s on every job: skipped, after
flushing what it wrote (docs/launch-cost.md, "The end")."""

from __future__ import annotations

import logging
import os
import sys


def main() -> None:
    from deepspeed.launcher.launch import main as launch  # reads sys.argv, as under `python -m`

    launch()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
