"""One SSH route opened: each hop (ProxyJump through the one before it, a ProxyCommand, or a
socket) handshaken, its host key checked before any credential is offered, then authenticated;
and which connect failures a retry can fix. paramiko is imported only inside functions."""

from __future__ import annotations

import socket
from typing import Any, List

from .auth import authenticate
from .base import transport_error
from .host_keys import known_keys, prefer_known_key_types, verify_host_key
from .ssh_config import Hop, SshConfig


def open_route(config: SshConfig, host: str, default_timeout: float, config_path: str) -> List[Any]:
    """The connected transports of `host`'s route, jump hosts first, the login node last; every
    one opened so far is closed when a hop fails."""
    import paramiko

    transports: List[Any] = []
    try:
        for hop in config.route(host):
            timeout = hop.connect_timeout or default_timeout
            if transports:
                sock = transports[-1].open_channel(
                    "direct-tcpip", (hop.hostname, hop.port), ("127.0.0.1", 0), timeout=timeout
                )
            elif hop.proxy_command:
                sock = paramiko.ProxyCommand(hop.proxy_command)
            else:
                sock = socket.create_connection((hop.hostname, hop.port), timeout=timeout)
            t = paramiko.Transport(sock)
            transports.append(t)
            t.banner_timeout = t.handshake_timeout = t.auth_timeout = timeout
            known = known_keys(hop)
            prefer_known_key_types(t, known)
            handshake(t, hop, timeout, config_path)
            # checked before any credential is offered
            verify_host_key(hop, t.get_remote_server_key(), known, config.ssh_command(hop.alias))
            authenticate(hop, t)
            t.set_keepalive(30)  # long `logs -f` sessions survive idle-killing firewalls
        return transports
    except BaseException:
        for t in reversed(transports):
            t.close()
        raise


def handshake(t: Any, hop: Hop, timeout: float, config_path: str) -> None:
    """The SSH banner and key exchange, bounded by paramiko's own timeouts (set to the hop's);
    an endpoint that accepts TCP but never speaks SSH is named, not retried."""
    import paramiko

    try:
        # paramiko's banner and handshake timeouts end it first: waiting as long here would race
        # them and end with a bare "No existing session"
        t.start_client(timeout=2 * timeout + 5)
    except (OSError, EOFError, paramiko.SSHException) as exc:
        if t.remote_version or not timed_out(exc):
            raise
    else:
        if t.initial_kex_done:
            return
        if t.remote_version:
            raise paramiko.SSHException(f"no SSH key exchange within {timeout:g} s")
    where = f"{hop.hostname}:{hop.port}" + (f" ({hop.alias})" if hop.alias != hop.hostname else "")
    raise transport_error(
        f"{where} accepted the connection but sent no SSH banner within {timeout:g} s: is it an SSH server?",
        hint=f"check HostName and Port of {hop.alias} in {config_path}",
    )


def timed_out(exc: BaseException) -> bool:
    """A timeout, or an error paramiko raised from one (its "Error reading SSH protocol banner")."""
    return any(isinstance(e, socket.timeout) for e in (exc, exc.__cause__, exc.__context__))


def worth_retrying(exc: BaseException) -> bool:
    """Fast failures that a restarting or busy sshd explains: refused, reset, closed before its
    banner (sshd's MaxStartups drops), a proxy or jump host that could not connect yet. Not a
    timeout (the hop's whole ConnectTimeout was spent on silence; another try waits as long for the
    same), nor a protocol error (the same server answers the same)."""
    import paramiko

    if timed_out(exc):
        return False
    if isinstance(exc, (paramiko.ProxyCommandFailure, paramiko.ChannelException)):
        return True
    if isinstance(exc, paramiko.SSHException):
        return isinstance(exc.__cause__ or exc.__context__, (OSError, EOFError))
    return True


def describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return " ".join(text.split())


def alive(t: Any) -> bool:
    """Whether the connection still answers (a round trip, not just paramiko's flag)."""
    if t is None or not t.is_active():
        return False
    try:
        t.global_request("keepalive@openssh.com", wait=True)  # sshd answers failure; any answer will do
    except (OSError, EOFError):
        return False
    return t.is_active()
