"""`hpc-launch ARGS` run in this process: the same answer a subprocess gives, without its start-up.

For tests about what the CLI prints or refuses (its output, exit code, files it writes), not about the
process itself (signals, exec, what a child inherits): those keep `subprocess.run([hpc_launch_bin, ...])`.
Each start-up of the `hpc-launch` script costs ~0.2 CPU-s; the fast tier made hundreds of them.

Not captured: output through a stream bound before the call (sweep's follow loop takes
`write=sys.stderr.write` as a default argument; a logging handler made at an earlier import). A test
whose assertion reads such output keeps a subprocess (test_sweep's `logs -f`).
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import warnings
from typing import Mapping, Optional, Sequence


def run_cli(
    args: Sequence[str], env: Optional[Mapping[str, str]] = None, cwd: Optional[os.PathLike | str] = None
) -> subprocess.CompletedProcess:
    """cli.main(args) with os.environ = env (when given) and the working directory cwd, its stdout
    and stderr captured; returned as subprocess.run(..., capture_output=True, text=True) would."""
    from hpc_launch import cli, render
    from hpc_launch.site import profiles

    saved_env, saved_cwd, saved_sigint = dict(os.environ), os.getcwd(), signal.getsignal(signal.SIGINT)
    out, err = io.StringIO(), io.StringIO()
    rc = 0
    try:
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        if cwd is not None:
            os.chdir(cwd)
        _forget_environment(profiles, render)  # the cluster and template directories come from it
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), _warnings_as_a_process_shows_them():
            try:
                cli.main(list(args))
            except SystemExit as exc:
                rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
                if not isinstance(exc.code, (int, type(None))):
                    err.write(f"{exc.code}\n")
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        signal.signal(signal.SIGINT, saved_sigint)
        _forget_environment(profiles, render)
    return subprocess.CompletedProcess(list(args), rc, out.getvalue(), err.getvalue())


def _forget_environment(profiles, render) -> None:
    """What a process reads from its environment once: the clusters found and the templates' loader."""
    profiles._discover.cache_clear()
    render._ENV = None


@contextlib.contextmanager
def _warnings_as_a_process_shows_them():
    """Python's default filters, shown on the (captured) stderr: a warning that would be a second
    line on a process's stderr is one here too, not swallowed by pytest's warning capture."""
    with warnings.catch_warnings():
        warnings.resetwarnings()
        warnings.simplefilter("default")
        for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
            warnings.simplefilter("ignore", category)  # put before "default": filters are tried in order
        warnings.showwarning = getattr(warnings, "_showwarning_orig", warnings.showwarning)
        yield
