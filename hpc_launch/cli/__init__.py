"""The face: each command parses its options, calls one function of the core, and prints.
No transport, no file parsing, no orchestration lives here (docs/architecture.md).

  app          the typer apps, option parsing shared by commands, printing
  submit_cmds  submit, sweep
  job_cmds     logs, status, list, adopt, cancel, doctor, report, hosts
  info_cmds    hostfile, announce, clusters, plan, completion
"""

from __future__ import annotations

import os
import signal
import sys
from typing import List, Optional


def _interrupted_while_starting(signum, frame):
    raise SystemExit(130)  # Ctrl-C before any command ran: nothing to undo, nothing to say


if __name__ in ("hpc_launch.cli", "__main__"):
    signal.signal(signal.SIGINT, _interrupted_while_starting)

# after the handler: importing typer is most of the start-up time
from ..errors import HpcLaunchError  # noqa: E402
from ..protocol import EXIT_SIGINT  # noqa: E402
from . import info_cmds, job_cmds, submit_cmds  # noqa: E402,F401  (each registers its commands)
from .app import COMPLETE_VAR, app, err  # noqa: E402

__all__ = ["app", "main"]


def main(argv: Optional[List[str]] = None) -> None:
    try:  # typer >= 0.26 vendors click
        from typer._click import exceptions as click_exc
    except ImportError:  # pragma: no cover - older typer uses click itself
        from click import exceptions as click_exc  # type: ignore[no-redef]
    from typer.main import get_command

    if os.environ.get(COMPLETE_VAR):  # the shell asks for completions: typer's classes answer
        from typer._completion_classes import completion_init

        completion_init()
    command = get_command(app)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # from here on, Ctrl-C is KeyboardInterrupt
    try:
        rc = command.main(
            args=argv if argv is not None else sys.argv[1:], prog_name="hpc-launch", standalone_mode=False
        )
    except HpcLaunchError as exc:
        err(exc.one_line())
        sys.exit(exc.exit_code)
    except click_exc.UsageError as exc:
        if not exc.format_message().strip():  # bare `hpc-launch`: the help was printed, nothing else to say
            sys.exit(2)
        hint = f" (see `hpc-launch {exc.ctx.info_name if exc.ctx and exc.ctx.parent else ''} --help`)".replace(
            "  ", " "
        )
        err(" ".join(exc.format_message().split()) + hint)
        sys.exit(2)
    except getattr(click_exc, "Abort", KeyboardInterrupt):
        err("aborted")
        sys.exit(EXIT_SIGINT)
    except KeyboardInterrupt:
        sys.exit(EXIT_SIGINT)
    except BrokenPipeError:
        sys.exit(0)
    except Exception as exc:  # last resort: one line, the traceback only when asked for
        if os.environ.get("HPC_LAUNCH_DEBUG"):
            raise
        err(f"{_describe(exc)} (HPC_LAUNCH_DEBUG=1 shows the traceback; please report it if the cause is unclear)")
        sys.exit(1)
    finally:
        _close_connections()
    sys.exit(rc if isinstance(rc, int) else 0)


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


if __name__ == "__main__":
    main()
