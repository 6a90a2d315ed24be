"""paramiko, imported without `invoke`. paramiko.config imports invoke at once, only to run an
ssh_config `Match exec` line, and invoke brings asyncio, unittest.mock and yaml with it: about
40% of paramiko's import, paid by every command that connects. ssh_config.py hands invoke back
when a config has a `Match exec` line."""

from __future__ import annotations

import re
import sys
from types import ModuleType

_MATCH_EXEC = re.compile(r"^\s*match\s.*\bexec\b", re.IGNORECASE | re.MULTILINE)


def load() -> ModuleType:
    if "paramiko" not in sys.modules:
        blocked = "invoke" not in sys.modules
        if blocked:
            sys.modules["invoke"] = None  # type: ignore[assignment]  # paramiko.config catches the ImportError
        try:
            import paramiko  # noqa: F401
        finally:
            if blocked and sys.modules.get("invoke", ModuleType("x")) is None:
                del sys.modules["invoke"]
    return sys.modules["paramiko"]


def allow_match_exec(config_text: str) -> None:
    """Give paramiko invoke back when the config runs commands in `Match exec`."""
    if not _MATCH_EXEC.search(config_text):
        return
    import invoke  # noqa: F401  (a dependency of paramiko, so installed)
    import paramiko.config

    if paramiko.config.invoke is None:
        paramiko.config.invoke = invoke
