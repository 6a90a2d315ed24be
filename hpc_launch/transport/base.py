"""What every transport returns and promises, and the one way a TransportError is made."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping, Optional, Protocol, Sequence

from hpc_launch.errors import TransportError

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class CommandResult:
    rc: int
    out: str
    err: str


class Transport(Protocol):
    host: str

    def run(
        self,
        argv: Sequence[str],
        *,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, Optional[str]]] = None,
        timeout: float = 60.0,
        stdin: Optional[str] = None,
    ) -> CommandResult: ...

    def put_text(self, path: str, text: str, mode: int = 0o644) -> None: ...

    def put_private(self, path: str, data: bytes) -> None: ...

    def read_from(self, path: str, offset: int, limit: int = 1 << 20) -> bytes: ...

    def size(self, path: str) -> Optional[int]: ...

    def remove(self, path: str) -> None: ...

    def resolve_path(self, path: str) -> str: ...

    def close(self) -> None: ...


def transport_error(message: str, *, hint: Optional[str] = None, maybe_ran: bool = False) -> TransportError:
    """A TransportError that says whether the command may have run (callers must not resend it)."""
    err = TransportError(message, hint=hint)
    err.maybe_ran = maybe_ran
    return err


def check_env_names(env: Optional[Mapping[str, Optional[str]]]) -> None:
    for name in env or {}:
        if not _ENV_NAME.match(name):
            raise ValueError(f"not a valid environment variable name: {name!r}")


def decode_output(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")
