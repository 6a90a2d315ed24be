"""The string a remote sshd runs: `bash -lc` around the argv, with cwd, env and a marker line.

Knows nothing of SSH itself; the same string works through any login shell.
"""

from __future__ import annotations

import base64
import re
import shlex
from typing import Mapping, Optional, Sequence

from .base import check_env_names

# Printed just before the command so that whatever a login script prints (banners, module
# messages, conda init) can be cut off stdout and stderr before anyone parses them.
SENTINEL = "__hpc_launch_output_begins_3f9c1b__"
# Characters that every login shell (sh, bash, zsh, ksh, csh, tcsh, fish) reads literally
# inside single quotes. Anything else is sent base64-encoded instead.
_PORTABLE = re.compile(r"^[ -~]*$")
_NOT_PORTABLE_IN_QUOTES = set("!\\")


def wrap_remote_command(
    argv: Sequence[str],
    cwd: Optional[str] = None,
    env: Optional[Mapping[str, Optional[str]]] = None,  # None: unset it
    *,
    runner: Optional[str] = None,
) -> str:
    """The exact string handed to the remote sshd (which gives it to the user's login shell).
    `runner`: bash that the login shell runs with `argv` as its "$@" instead of exec-ing argv
    (send_files.RECEIVER), so no second shell starts."""
    if not argv:
        raise ValueError("empty command")
    check_env_names(env)
    steps = []
    if cwd:
        # A remote command starts in the home directory, so "~/x" is just "x".
        rel = cwd[2:] if cwd.startswith("~/") else ("" if cwd == "~" else cwd)
        if rel:
            steps.append(f"cd {shlex.quote(rel)}")
    unset = [k for k, v in (env or {}).items() if v is None]
    exports = {k: v for k, v in (env or {}).items() if v is not None}
    if unset:  # names only: a login script may export them, the submit command must not see them
        steps.append("unset " + " ".join(unset))
    if exports:
        steps.append("export " + " ".join(f"{k}={shlex.quote(str(v))}" for k, v in exports.items()))
    steps.append(f"exec {shlex.join(argv)}" if runner is None else f"set -- {shlex.join(argv)} && {{ {runner}; }}")
    inner = f"echo {SENTINEL}; echo {SENTINEL} >&2; " + " && ".join(steps)
    quoted = shlex.quote(inner)
    if _PORTABLE.match(quoted) and not (_NOT_PORTABLE_IN_QUOTES & set(quoted)):
        return f"bash -lc {quoted}"
    # Newlines, "!", backslashes or non-ASCII: csh/tcsh/fish would mangle them even inside
    # single quotes, so ship the command as base64, which every shell passes through intact.
    b64 = base64.b64encode(inner.encode()).decode()
    return f"bash -lc 'eval \"$(printf %s {b64} | base64 -d)\"'"


def strip_preamble(text: str) -> str:
    """What the command itself printed: everything after the SENTINEL line (login-script noise cut)."""
    marker = SENTINEL + "\n"
    return text.split(marker, 1)[1] if marker in text else text
