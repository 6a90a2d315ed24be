"""Where a job's commands run: one transport per host, opened on first use and shared by the
process (the face never opens one; it hands no transport to the core)."""

from __future__ import annotations

from typing import Callable

from ..protocol import is_local
from ..transport.base import Transport

# host ("localhost" or an ssh alias, as a record holds it) -> the transport that reaches it
TransportFor = Callable[[str], Transport]


def transport_for(host: str) -> Transport:
    from ..transport import open_transport  # paramiko only once a host over SSH needs it

    return open_transport(None if is_local(host) else host)
