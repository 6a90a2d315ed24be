"""The face: each command parses its options, calls one function of the core, and prints.
No transport, no file parsing, no orchestration lives here (docs/architecture.md).

  __init__       main(), the `hpc-launch` entry: the fast path or typer, one error handling for both
  fast           `hostfile` and `submit --dry-run` without typer (well-formed command lines only)
  declare        a command's typer options from the option table (hpc_launch/options.py)
  app            the typer apps, option parsing shared by commands, tables
  submit_cmds    submit, sweep, rerun, where      (submit's body: submit_run)
  job_cmds       logs, status, list, adopt, cancel, doctor, report, hosts
  alloc_cmds     alloc, run                        (their core: jobs/alloc)
  info_cmds      hostfile, announce, clusters, plan, completion   (hostfile's body: hostfile_run)
  submit_run     submit between parsing and its exit code (typer-free: both paths call it)
  hostfile_run   the same for hostfile
  option_values  option values as typed -> Python values (typer-free)
  printing       say, err, JSON (typer-free)

typer is imported only when a command line needs it: the fast path never imports typer, click,
rich or inspect, which are most of the start-up time.
"""

from __future__ import annotations

import os
import sys
import types
from typing import Any, Callable, List, Optional, Tuple, Type

import _signal


def _interrupted_while_starting(signum, frame):
    # Ctrl-C before any command ran: nothing to undo, nothing to say. Not SystemExit: raised while an
    # import runs a weakref callback, Python prints "Exception ignored" and the command went on.
    os._exit(130)


if __name__ in ("hpc_launch.cli", "__main__"):
    _signal.signal(_signal.SIGINT, _interrupted_while_starting)

# after the handler
from ..errors import HpcLaunchError  # noqa: E402
from ..protocol import EXIT_SIGINT  # noqa: E402
from .printing import err  # noqa: E402

__all__ = ["app", "main"]

COMPLETE_VAR = "_HPC_LAUNCH_COMPLETE"  # the shell's completion function calls us back with it set
NO_FAST_VAR = "HPC_LAUNCH_NO_FAST"  # set (to anything): every command line goes through typer

# what main() runs, and the classes of its usage error and of "aborted" (None: it raises no such)
Runner = Tuple[Callable[[], Any], Optional[Type[BaseException]], Optional[Type[BaseException]]]


def main(argv: Optional[List[str]] = None) -> None:
    args = list(argv) if argv is not None else sys.argv[1:]
    runner: Optional[Runner] = None
    if not os.environ.get(NO_FAST_VAR):
        from .fast import fast_runner

        runner = fast_runner(args)
    run, usage_error, abort = runner or _typer_runner(args)
    _signal.signal(_signal.SIGINT, _signal.default_int_handler)  # from here on, Ctrl-C is KeyboardInterrupt
    try:
        rc = run()
    except HpcLaunchError as exc:
        err(exc.one_line())
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        sys.exit(EXIT_SIGINT)
    except BrokenPipeError:
        sys.exit(0)
    except Exception as exc:
        if usage_error is not None and isinstance(exc, usage_error):
            _usage_error(exc)
        if abort is not None and isinstance(exc, abort):
            err("aborted")
            sys.exit(EXIT_SIGINT)
        if os.environ.get("HPC_LAUNCH_DEBUG"):  # last resort: one line, the traceback only when asked for
            raise
        err(f"{_describe(exc)} (HPC_LAUNCH_DEBUG=1 shows the traceback; please report it if the cause is unclear)")
        sys.exit(1)
    finally:
        _close_connections()
    sys.exit(rc if isinstance(rc, int) else 0)


def _name_arguments(command: Any) -> None:
    """A positional argument's help shows its name (JOB_ID), not also its type: typer prints
    `<str>` beside every one. Its values are read as before (a plain string type)."""
    try:  # typer >= 0.26 vendors click
        from typer._click import types as click_types
    except ImportError:  # pragma: no cover - older typer uses click itself
        from click import types as click_types  # type: ignore[no-redef]

    class Named(click_types.StringParamType):
        def get_metavar(self, param: Any, ctx: Any = None) -> str:
            return ""

    named = Named()
    for sub in getattr(command, "commands", {}).values():
        _name_arguments(sub)
    for param in getattr(command, "params", []):
        if param.param_type_name == "argument" and isinstance(param.type, click_types.StringParamType):
            param.type = named


def _typer_runner(args: List[str]) -> Runner:
    try:  # typer >= 0.26 vendors click
        from typer._click import exceptions as click_exc
    except ImportError:  # pragma: no cover - older typer uses click itself
        from click import exceptions as click_exc  # type: ignore[no-redef]
    from typer.main import get_command

    if os.environ.get(COMPLETE_VAR):  # the shell asks for completions: typer's classes answer
        from typer._completion_classes import completion_init

        completion_init()
    command = get_command(_typer_app())
    _name_arguments(command)

    def run() -> Any:
        return command.main(args=args, prog_name="hpc-launch", standalone_mode=False)

    return run, click_exc.UsageError, getattr(click_exc, "Abort", None)


def _usage_error(exc: Any) -> None:
    if not exc.format_message().strip():  # bare `hpc-launch`: the help was printed, nothing else to say
        sys.exit(2)
    hint = f" (see `hpc-launch {exc.ctx.info_name if exc.ctx and exc.ctx.parent else ''} --help`)".replace("  ", " ")
    err(" ".join(exc.format_message().split()) + hint)
    sys.exit(2)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        where = f" {exc.filename}" if exc.filename else ""
        return f"{exc.strerror}:{where}"
    if isinstance(exc, UnicodeDecodeError):
        return f"a file is not valid UTF-8 ({exc.reason} at byte {exc.start})"
    return " ".join(f"{type(exc).__name__}: {exc}".split())


def _close_connections() -> None:
    transport = sys.modules.get("hpc_launch.transport")
    if transport is not None:
        transport.close_all()


def _typer_app() -> Any:
    from . import alloc_cmds, info_cmds, job_cmds, submit_cmds  # noqa: F401  (each registers its commands)
    from .app import app

    return app


class _Package(types.ModuleType):
    """`hpc_launch.cli.app` is the typer app (typer.testing and the tests use it), built on first
    use so that the fast path never imports typer. Importing the submodule cli/app.py binds the
    same name on this package to the module: the setter lets it go, the name keeps the app."""

    @property
    def app(self) -> Any:
        return _typer_app()

    @app.setter
    def app(self, value: Any) -> None:
        pass


sys.modules[__name__].__class__ = _Package

if __name__ == "__main__":
    main()
