"""Logging in to one hop: ssh-agent and key files, then keyboard-interactive or password on a terminal.

Passwords, passphrases and prompt answers are never logged.
"""

from __future__ import annotations

import getpass
import logging
import os
import sys
from typing import Any, Callable, List, Tuple

from .ssh_config import Hop

log = logging.getLogger(__name__)


def authenticate(hop: Hop, t: Any) -> None:
    """Authenticate paramiko transport `t` as hop.user, or raise paramiko.AuthenticationException."""
    import paramiko

    allowed = ["publickey", "keyboard-interactive", "password"]
    for key in _keys(hop):
        try:
            t.auth_publickey(hop.user, key)
        except paramiko.BadAuthenticationType as exc:
            allowed = exc.allowed_types
            break
        except paramiko.AuthenticationException:
            continue
        if t.is_authenticated():
            return
        break  # partial success: the server wants a second factor
    if sys.stdin.isatty() and "keyboard-interactive" in allowed:
        t.auth_interactive(hop.user, _prompt_handler(hop))
    elif sys.stdin.isatty() and "password" in allowed:
        t.auth_password(hop.user, getpass.getpass(f"{hop.user}@{hop.alias}'s password: "))
    if not t.is_authenticated():
        raise paramiko.AuthenticationException(f"no accepted key for {hop.user}@{hop.alias}")


def _keys(hop: Hop) -> list:
    """Agent keys (unless IdentitiesOnly), then IdentityFile keys (default id_ed25519, id_ecdsa, id_rsa)."""
    import paramiko

    keys = []
    if not hop.identities_only and os.environ.get("SSH_AUTH_SOCK"):
        try:
            keys.extend(paramiko.Agent().get_keys())
        except paramiko.SSHException as exc:
            log.debug("ssh-agent unusable: %s", exc)
    files = hop.identity_files or [os.path.expanduser(f"~/.ssh/id_{k}") for k in ("ed25519", "ecdsa", "rsa")]
    for path in files:
        if not os.path.exists(path):
            continue
        try:
            keys.append(paramiko.PKey.from_path(path))
        except paramiko.PasswordRequiredException:
            if sys.stdin.isatty():
                keys.append(paramiko.PKey.from_path(path, getpass.getpass(f"Passphrase for {path}: ")))
            else:
                log.warning("skipping encrypted key %s (no terminal to ask; use ssh-agent)", path)
        except (paramiko.SSHException, ValueError, OSError) as exc:
            log.warning("skipping unreadable key %s: %s", path, exc)
    return keys


def _prompt_handler(hop: Hop) -> Callable[[str, str, List[Tuple[str, bool]]], List[str]]:
    """Keyboard-interactive (two-factor) prompts, asked on the terminal; answers never logged."""

    def handler(title: str, instructions: str, prompts: List[Tuple[str, bool]]) -> List[str]:
        for line in (title, instructions):
            if line:
                print(line, file=sys.stderr)
        return [
            getpass.getpass(f"[{hop.alias}] {p}") if not echo else input(f"[{hop.alias}] {p}") for p, echo in prompts
        ]

    return handler
