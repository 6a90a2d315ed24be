"""The entrypoint's stop request is the job layer's (hpc_launch/joblayer/stop.py, its one home)."""

from hpc_launch.joblayer.stop import RESUMABLE_EXIT, StopRequest

__all__ = ["RESUMABLE_EXIT", "StopRequest"]
