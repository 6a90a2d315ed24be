"""~/.ssh/config as hpc-launch reads it: one Hop per host on the way, ProxyJump chains as a route."""

from __future__ import annotations

import getpass
import os
from dataclasses import dataclass
from typing import Optional

from . import paramiko_lite
from .base import transport_error


@dataclass
class Hop:
    alias: str
    hostname: str
    port: int
    user: str
    identity_files: list
    identities_only: bool
    known_hosts_files: list
    host_key_alias: Optional[str]
    connect_timeout: Optional[float]
    proxy_command: Optional[str]

    @property
    def known_hosts_name(self) -> str:
        if self.host_key_alias:
            return self.host_key_alias
        return self.hostname if self.port == 22 else f"[{self.hostname}]:{self.port}"


class SshConfig:
    """One ssh_config file (empty when absent); `known_hosts_override` replaces every known_hosts file it names."""

    def __init__(self, path: str, known_hosts_override: Optional[str] = None):
        paramiko = paramiko_lite.load()
        self.path = path
        self.known_hosts_override = known_hosts_override
        text = ""
        if os.path.exists(path):
            with open(path, encoding="utf-8", errors="replace") as fh:
                text = fh.read()
        paramiko_lite.allow_match_exec(text)
        self._config = paramiko.SSHConfig.from_text(text)

    def hop(self, spec: str) -> Hop:
        """One hop from an alias or a ProxyJump entry ([user@]host[:port] or ssh://...)."""
        user = port = None
        if spec.startswith("ssh://"):
            spec = spec[len("ssh://") :]
        if "@" in spec:
            user, spec = spec.rsplit("@", 1)
        if spec.count(":") == 1:
            spec, port = spec.split(":")
        cfg = self._config.lookup(spec)
        if self.known_hosts_override:
            known = [self.known_hosts_override]
        else:
            user_files = (cfg.get("userknownhostsfile") or "~/.ssh/known_hosts ~/.ssh/known_hosts2").split()
            global_files = (
                cfg.get("globalknownhostsfile") or "/etc/ssh/ssh_known_hosts /etc/ssh/ssh_known_hosts2"
            ).split()
            known = user_files + global_files
        timeout = cfg.get("connecttimeout")
        return Hop(
            alias=spec,
            hostname=cfg.get("hostname", spec),
            port=int(port or cfg.get("port", 22)),
            user=user or cfg.get("user") or getpass.getuser(),
            identity_files=[os.path.expanduser(p) for p in cfg.get("identityfile", [])],
            identities_only=cfg.get("identitiesonly", "no").lower() == "yes",
            known_hosts_files=[os.path.expanduser(p) for p in known],
            host_key_alias=cfg.get("hostkeyalias"),
            connect_timeout=float(timeout) if timeout else None,
            proxy_command=None if cfg.get("proxycommand", "none") == "none" else cfg["proxycommand"],
        )

    def route(self, host: str) -> list:
        """Hops to reach `host`, first to last (ProxyJump a,b -> [a, b, host])."""
        return self._route(host, host, 0)

    def _route(self, alias: str, host: str, depth: int) -> list:
        if depth > 8:
            raise transport_error(f"ProxyJump chain for {host} is too deep (a loop in ssh config?)")
        target = self.hop(alias)
        jump = self._config.lookup(target.alias).get("proxyjump", "none")
        if jump.lower() == "none":
            return [target]
        specs = [s.strip() for s in jump.split(",") if s.strip()]
        first = self._route(specs[0], host, depth + 1)  # the first jump may itself need a jump
        return first + [self.hop(s) for s in specs[1:]] + [target]

    def ssh_command(self, alias: str) -> str:
        """The ssh command line that reaches `alias` with this same config (for hints to the user)."""
        return f"ssh {alias}" if self.path == os.path.expanduser("~/.ssh/config") else f"ssh -F {self.path} {alias}"
