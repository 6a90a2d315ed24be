"""Run commands and move files on the login node, here or over SSH. Knows nothing of schedulers.

Over SSH (paramiko, imported lazily so the CLI stays light):
- ~/.ssh/config is honoured (HostName, User, Port, IdentityFile, IdentitiesOnly, ProxyJump
  with several hops, ProxyCommand, ConnectTimeout, UserKnownHostsFile, HostKeyAlias).
- Host keys are always checked against known_hosts; an unknown or changed key is refused
  (HostKeyError), never accepted.
- One connection per host per process, reused for every command and file operation.
- Connecting is retried with exponential backoff; a command is never sent twice: when the
  outcome of a sent command is unknown, TransportError.maybe_ran is True.
- Commands run as `bash -lc '<cmd>'` so site login scripts (module, PATH to qsub) apply.
- A submit's files (capsule, script, 0600 secrets) travel on the submit command's stdin and are
  written atomically by the login shell before it runs (send_files): one channel, no SFTP writes.
  SFTP serves the reads: the home directory, stats, log offsets.

Modules, each importing only those above it:
  base            CommandResult, the Transport protocol, transport_error
  local           LocalTransport (this machine)
  remote_command  the `bash -lc` string sent to sshd, and stripping login-script output
  paramiko_lite   paramiko imported without invoke (needed only for `Match exec`)
  ssh_config      ssh_config lookups: Hop, ProxyJump routes
  host_keys       known_hosts checks (unknown vs changed key)
  auth            keys, ssh-agent, keyboard-interactive and password prompts
  send_files      files written by the command that needs them (its stdin), FilesAhead
  ssh             SSHTransport: connect with retries, run, run_with_files, SFTP files
  (here)          open_transport / close_all: the process-wide connection cache
"""

from __future__ import annotations

import threading
from typing import Any, Optional

from .base import CommandResult, Transport, transport_error
from .local import LOCAL_NAMES, LocalTransport
from .remote_command import SENTINEL, wrap_remote_command
from .ssh import SSHTransport

__all__ = [
    "CommandResult",
    "Transport",
    "transport_error",
    "LOCAL_NAMES",
    "LocalTransport",
    "SENTINEL",
    "wrap_remote_command",
    "SSHTransport",
    "open_transport",
    "close_all",
]

_cache: dict = {}
_cache_lock = threading.Lock()


def open_transport(login: Optional[str], **kw: Any) -> Transport:
    """LocalTransport for None/""/"localhost"; otherwise the process-wide SSHTransport for `login`."""
    if login is None or login in LOCAL_NAMES:
        return LocalTransport()
    key = (login, tuple(sorted(kw.items())))
    with _cache_lock:
        if key not in _cache:
            _cache[key] = SSHTransport(login, **kw)
        return _cache[key]


def close_all() -> None:
    """Close every cached SSH connection (the CLI calls this on exit)."""
    with _cache_lock:
        for t in _cache.values():
            t.close()
        _cache.clear()
