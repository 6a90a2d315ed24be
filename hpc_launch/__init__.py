"""hpc-launch: render, submit and follow DeepSpeed batch jobs on named clusters."""

__version__ = "0.1.0"
