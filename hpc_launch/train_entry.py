"""Run the shipped training entrypoint by file path: `python -u .../hpc_launch/train_entry.py ARGS`.

`python -m hpc_launch.train` puts the work directory first on sys.path, and DeepSpeed's multi-node
launchers put it on PYTHONPATH, so a `hpc_launch/train/` or `train.py` of the user's there would run
instead of ours. Run by path, this file's own directory heads sys.path; it is swapped for the
directory that holds the shipped `train` package, which then wins over anything on PYTHONPATH.
"""

import os
import sys

if __name__ == "__main__":
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    from hpc_launch.train.__main__ import entry

    sys.argv[0] = "hpc-train"
    entry()
