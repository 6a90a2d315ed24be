"""hpc-launch: render, submit and follow DeepSpeed batch jobs on named clusters."""

# The `hpc-launch` command: Ctrl-C before any command ran ends quietly (exit 130), not with a
# traceback of the imports (hpc_launch.cli hands Ctrl-C back to Python once it runs). This is the
# first statement of the package and uses only built-in modules (no file lookup, no `enum` import
# of `signal.py`), so the window in which Ctrl-C still lands in our code is a few bytecodes wide.
import sys as _sys

# It ends the process outright: an exception raised where Python ignores it (a handler that runs inside
# an import lock's weakref callback, "Exception ignored in: ... SystemExit: 130") let the command go on.
if _sys.argv and _sys.argv[0].rsplit("/", 1)[-1] == "hpc-launch":
    import _signal
    import posix as _posix

    _signal.signal(_signal.SIGINT, lambda signum, frame: _posix._exit(130))  # HANDLER-INSTALLED

__version__ = "0.1.0"
