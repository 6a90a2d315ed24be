"""Host-key checks: known_hosts is the only authority; an unknown or changed key is refused, never added."""

from __future__ import annotations

import logging
import os
import shlex
from typing import Any

from hpc_launch.errors import HostKeyError

from .ssh_config import Hop

log = logging.getLogger(__name__)


def known_keys(hop: Hop) -> dict:
    """{key type: (key, known_hosts file)} for this hop; the first file that names a type wins."""
    import paramiko

    keys: dict = {}
    for path in hop.known_hosts_files:
        if not os.path.exists(path):
            continue
        host_keys = paramiko.HostKeys()
        try:
            host_keys.load(path)
        except (OSError, paramiko.SSHException) as exc:
            log.warning("ignoring unreadable known_hosts file %s: %s", path, exc)
            continue
        for ktype, key in (host_keys.lookup(hop.known_hosts_name) or {}).items():
            keys.setdefault(ktype, (key, path))
    return keys


def prefer_known_key_types(t: Any, known: dict) -> None:
    # Ask the server for a key type we already know, as OpenSSH does; otherwise a server with
    # several host keys could offer one we have never seen and look "unknown".
    if not known:
        return
    opts = t.get_security_options()
    wanted = set()
    for ktype in known:
        wanted |= {"ssh-rsa", "rsa-sha2-256", "rsa-sha2-512"} if ktype == "ssh-rsa" else {ktype}
    current = list(opts.key_types)
    opts.key_types = [k for k in current if k in wanted] + [k for k in current if k not in wanted]


def verify_host_key(hop: Hop, key: Any, known: dict, ssh_cmd: str) -> None:
    """Return if `key` is the known one; else HostKeyError saying unknown or CHANGED, with `ssh_cmd` to fix it."""
    name = hop.known_hosts_name
    if not known:
        raise HostKeyError(
            f"host key for {hop.alias} ({name}, {key.get_name()} {key.fingerprint}) is not in known_hosts",
            hint=f"run `{ssh_cmd}` once to verify and accept it",
        )
    entry = known.get(key.get_name())
    if entry is not None and entry[0] == key:
        return
    path = entry[1] if entry else next(iter(known.values()))[1]
    file_arg = "" if path == os.path.expanduser("~/.ssh/known_hosts") else f" -f {shlex.quote(path)}"
    raise HostKeyError(
        f"host key for {hop.alias} ({name}) CHANGED: the server sent {key.get_name()} {key.fingerprint}, "
        f"{path} has a different one; possible man-in-the-middle attack",
        hint=f"if the change is expected remove the old key with "
        f"`ssh-keygen -R {shlex.quote(name)}{file_arg}` and run `{ssh_cmd}` to accept the new one",
    )
