"""The DeepSpeed training payload that every hpc-launch job script runs (`python -m hpc_launch.train`).

Light at import time: torch, torchvision and deepspeed are imported inside functions, so the
launcher can import `train.ds_config`'s pure helpers and `--help` stays fast.
"""

__version__ = "0.1.0"
