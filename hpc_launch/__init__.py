"""hpc-launch: render, submit and follow DeepSpeed batch jobs on named clusters."""

__version__ = "0.1.0"


def _quiet_interrupt_while_starting() -> None:
    """The `hpc-launch` command: Ctrl-C before any command ran ends quietly (exit 130), not with a
    traceback of the imports (hpc_launch.cli hands Ctrl-C back to Python once it runs)."""
    import os
    import signal
    import sys

    if os.path.basename(sys.argv[0] if sys.argv else "") == "hpc-launch":
        signal.signal(signal.SIGINT, lambda signum, frame: sys.exit(130))


_quiet_interrupt_while_starting()
