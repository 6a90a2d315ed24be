"""A real OpenSSH server on 127.0.0.1 for tests: its own host key, client key, config and known_hosts.

    handle = start_sshd(tmp_path)                # alias "test-login" in handle.ssh_config
    t = SSHTransport(handle.alias, ssh_config=handle.ssh_config)
    jump = start_sshd(tmp_path / "jump", alias="test-jump")
    write_ssh_config(path, [jump.block(), handle.block(ProxyJump="test-jump")])

If sshd is not installed the fixture fails (it does not skip): missing infrastructure must show.
"""

from __future__ import annotations

import getpass
import os
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, List, Optional

SSHD = "/usr/sbin/sshd"
SFTP_SERVER = "/usr/lib/openssh/sftp-server"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _keygen(path: Path) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "hpc-launch-test", "-f", str(path)],
        check=True,
        stdin=subprocess.DEVNULL,
    )


@dataclass
class SshdHandle:
    dir: Path
    alias: str
    port: int
    user: str
    host_key_pub: str  # "ssh-ed25519 AAAA..."
    client_key: Path
    ssh_config: Path  # contains only this server's Host block
    known_hosts: Path  # this server's key under "[127.0.0.1]:port"
    log: Path
    proc: Optional[subprocess.Popen] = None
    extra_config: List[str] = field(default_factory=list)

    @property
    def known_hosts_name(self) -> str:
        return f"[127.0.0.1]:{self.port}"

    def block(self, alias: Optional[str] = None, **options: str) -> str:
        """The `Host` block for this server, with extra ssh_config options (e.g. ProxyJump)."""
        # ssh_config takes the FIRST value of an option, so overrides replace the defaults.
        settings = {
            "HostName": "127.0.0.1",
            "Port": str(self.port),
            "User": self.user,
            "IdentityFile": str(self.client_key),
            "IdentitiesOnly": "yes",
            "UserKnownHostsFile": str(self.known_hosts),
            **options,
        }
        lines = [f"Host {alias or self.alias}"] + [f"  {k} {v}" for k, v in settings.items()]
        return "\n".join(lines) + "\n"

    def accepted_logins(self) -> int:
        """Successful authentications seen by this sshd: one per TCP connection."""
        return self.log.read_text().count("Accepted publickey")

    def wait_until_listening(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"sshd exited with {self.proc.returncode}: {self.log.read_text()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"sshd did not listen on 127.0.0.1:{self.port} within {timeout} s")

    def start(self) -> "SshdHandle":
        """Start (or restart after stop()) the server on the same port with the same keys."""
        self.proc = subprocess.Popen(
            [SSHD, "-D", "-f", str(self.dir / "sshd_config"), "-E", str(self.log)], stdin=subprocess.DEVNULL
        )
        self.wait_until_listening()
        return self

    def session_pids(self) -> List[int]:
        """Per-connection sshd processes (children of the listener), for tests that cut connections."""
        if self.proc is None:
            return []
        out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(self.proc.pid)], capture_output=True, text=True)
        return [int(p) for p in out.stdout.split()]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            for pid in self.session_pids():
                try:
                    os.kill(pid, 15)
                except ProcessLookupError:
                    pass
            self.proc.terminate()
            self.proc.wait(timeout=10)
        self.proc = None


def write_ssh_config(path: Path, blocks: Iterable[str]) -> Path:
    path.write_text("\n".join(blocks))
    return path


def prepare_sshd(
    tmp_path: Path, *, alias: str = "test-login", port: Optional[int] = None, extra_config: Iterable[str] = ()
) -> SshdHandle:
    """Keys and configs for a server, without starting it (tests of retry start it later)."""
    if not os.path.exists(SSHD):
        raise RuntimeError(f"{SSHD} not found: install openssh-server (apt-get install -y openssh-server)")
    d = Path(tmp_path)
    d.mkdir(parents=True, exist_ok=True)
    os.makedirs("/run/sshd", exist_ok=True) if os.geteuid() == 0 else None  # privilege separation dir
    _keygen(d / "host_ed25519")
    _keygen(d / "client_ed25519")
    (d / "authorized_keys").write_text((d / "client_ed25519.pub").read_text())
    port = port or free_port()
    user = getpass.getuser()
    sshd_config = [
        "ListenAddress 127.0.0.1",
        f"Port {port}",
        f"HostKey {d / 'host_ed25519'}",
        f"PidFile {d / 'sshd.pid'}",
        f"AuthorizedKeysFile {d / 'authorized_keys'}",
        "StrictModes no",
        "UsePAM no",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "PermitRootLogin prohibit-password",
        "AllowTcpForwarding yes",
        "LogLevel VERBOSE",
        f"Subsystem sftp {SFTP_SERVER}",
        *extra_config,
    ]
    (d / "sshd_config").write_text("\n".join(sshd_config) + "\n")
    host_pub = " ".join((d / "host_ed25519.pub").read_text().split()[:2])
    known_hosts = d / "known_hosts"
    known_hosts.write_text(f"[127.0.0.1]:{port} {host_pub}\n")
    handle = SshdHandle(
        dir=d,
        alias=alias,
        port=port,
        user=user,
        host_key_pub=host_pub,
        client_key=d / "client_ed25519",
        ssh_config=d / "ssh_config",
        known_hosts=known_hosts,
        log=d / "sshd.log",
        extra_config=list(extra_config),
    )
    write_ssh_config(handle.ssh_config, [handle.block()])
    return handle


def start_sshd(
    tmp_path: Path, *, alias: str = "test-login", port: Optional[int] = None, extra_config: Iterable[str] = ()
) -> SshdHandle:
    """A running sshd on 127.0.0.1; call .stop() (the pytest fixtures do)."""
    return prepare_sshd(tmp_path, alias=alias, port=port, extra_config=extra_config).start()
