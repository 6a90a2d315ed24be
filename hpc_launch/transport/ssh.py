"""SSHTransport: one paramiko connection to a login node (through its ProxyJump hops), reused for
commands (connect retried; a sent command never resent), commands that carry files on their stdin
(send_files.py: a submit's script, capsule and secrets) and SFTP file operations (reads, stats).
Opening the route is ssh_connect.py; what each file operation does on the SFTP session is
sftp_files.py."""

from __future__ import annotations

import logging
import os
import posixpath
import select
import shlex
import socket
import threading
import time
from typing import Any, Callable, List, Mapping, Optional, Sequence, TypeVar

from hpc_launch.errors import HostKeyError, TransportError

from . import paramiko_lite, send_files, sftp_files
from .base import CommandResult, decode_output, transport_error
from .remote_command import strip_preamble, wrap_remote_command
from .ssh_config import SshConfig
from .ssh_connect import alive, describe, open_route, worth_retrying

_T = TypeVar("_T")  # what an SFTP operation returns

log = logging.getLogger(__name__)
# paramiko's transport thread logs every failed handshake at ERROR with its traceback; with no
# handler configured, Python prints those on stderr. The failure reaches the caller as one error.
logging.getLogger("paramiko").addHandler(logging.NullHandler())


class _Unknown(Exception):
    """Raised inside run() once a command was sent and its outcome is unknown."""


class SSHTransport:
    """A login node over SSH. Lazily connects; the one connection is reused until close()."""

    def __init__(
        self,
        host: str,
        *,
        ssh_config: Optional[str] = None,
        known_hosts: Optional[str] = None,
        connect_timeout: float = 10.0,
        retries: int = 3,
        backoff: float = 0.5,
    ):
        paramiko_lite.load()  # fail early and clearly if missing

        self.host = host
        self.ssh_config_path = os.path.expanduser(
            ssh_config or os.environ.get("HPC_LAUNCH_SSH_CONFIG") or "~/.ssh/config"
        )
        override = known_hosts or os.environ.get("HPC_LAUNCH_KNOWN_HOSTS")
        self.known_hosts_override = os.path.expanduser(override) if override else None
        self.connect_timeout = connect_timeout
        self.retries = retries
        self.backoff = backoff
        self.connects = 0  # connections established (tests and benches read these)
        self.connect_attempts = 0
        self._lock = threading.RLock()
        self._transports: list = []  # jump hosts first, the login node last
        self._sftp = None
        self._home: Optional[str] = None
        self.config = SshConfig(self.ssh_config_path, self.known_hosts_override)

    # ---- connecting

    def _connect_once(self) -> List[Any]:
        self.connect_attempts += 1
        return open_route(self.config, self.host, self.connect_timeout, self.ssh_config_path)

    def _connect(self) -> None:
        """Connect with bounded retries; only failures a retry can fix are retried (_worth_retrying)."""
        import paramiko

        delay = self.backoff
        for attempt in range(self.retries + 1):
            try:
                self._transports = self._connect_once()
                self.connects += 1
                log.debug("connected to %s via %d hop(s)", self.host, len(self._transports))
                return
            except (HostKeyError, paramiko.AuthenticationException, socket.gaierror):
                raise
            except TransportError:
                raise
            except (OSError, EOFError, paramiko.SSHException) as exc:
                if attempt == self.retries or not worth_retrying(exc):
                    raise transport_error(
                        f"cannot connect to {self.host}: {describe(exc)} "
                        f"(after {attempt + 1} attempt{'s' if attempt else ''})",
                        hint=f"check that `ssh {self.host}` works from this machine",
                    ) from exc
                log.debug("connect to %s failed (%s); retrying in %.1f s", self.host, describe(exc), delay)
                time.sleep(delay)
                delay *= 2

    def _transport(self) -> Any:
        with self._lock:
            if not (self._transports and self._transports[-1].is_active()):
                self._drop()
                try:
                    self._connect()
                except socket.gaierror as exc:
                    raise transport_error(
                        f"cannot resolve {self.host}: {exc.strerror}",
                        hint="check the host name or its HostName in ssh config",
                    ) from exc
                except self._paramiko().AuthenticationException as exc:
                    raise transport_error(
                        f"ssh authentication to {self.host} failed: {exc}",
                        hint="load your key into ssh-agent or set IdentityFile in ssh config",
                    ) from exc
            return self._transports[-1]

    @staticmethod
    def _paramiko() -> Any:
        import paramiko

        return paramiko

    def _drop(self) -> None:
        with self._lock:
            if self._sftp is not None:
                try:
                    self._sftp.close()
                except Exception:  # the connection may already be gone
                    pass
            self._sftp = None
            for t in reversed(self._transports):
                t.close()
            self._transports = []

    # ---- commands

    def run(
        self,
        argv: Sequence[str],
        *,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, Optional[str]]] = None,
        timeout: float = 60.0,
        stdin: Optional[str] = None,
    ) -> CommandResult:
        data = stdin.encode() if stdin is not None else None
        return self._run(wrap_remote_command(argv, cwd, env), shlex.join(argv), timeout, data)

    def run_with_files(
        self,
        files: Sequence[send_files.OutgoingFile],
        argv: Sequence[str],
        *,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, Optional[str]]] = None,
        timeout: float = 60.0,
        stdin: Optional[str] = None,
    ) -> CommandResult:
        """Write `files`, then run `argv`, in one exec channel: the files' bytes go on its stdin
        (send_files.py), so no SFTP session and no round trip per file. FileWriteError when a
        file could not be written (none is left; the command did not run)."""
        data = send_files.payload(files, stdin.encode() if stdin is not None else None)
        command = wrap_remote_command(send_files.receiver_args(files, argv, cwd), None, env, runner=send_files.RECEIVER)
        result = self._run(command, shlex.join(argv), timeout, data)
        send_files.raise_if_not_written(files, result)
        return result

    def _run(self, command: str, shown: str, timeout: float, stdin: Optional[bytes]) -> CommandResult:
        """`shown` names the command in errors: never the env values, they may hold secrets."""
        import paramiko

        for attempt in (1, 2):
            t = self._transport()
            try:
                channel = t.open_session(timeout=self.connect_timeout)
                break
            except (OSError, EOFError, paramiko.SSHException) as exc:
                self._drop()  # nothing was sent yet: reconnect and try once more
                if attempt == 2:
                    raise transport_error(f"cannot open a session on {self.host}: {describe(exc)}") from exc
        try:
            return self._exchange(channel, command, stdin, timeout)
        except _Unknown as exc:
            self._drop()
            raise transport_error(
                f"lost `{shown}` on {self.host}: {exc}",
                hint="it may have run; check (e.g. `hpc-launch list`) before retrying",
                maybe_ran=True,
            ) from exc
        finally:
            channel.close()

    def _exchange(self, channel: Any, command: str, stdin: Optional[bytes], timeout: float) -> CommandResult:
        import paramiko

        deadline = time.monotonic() + timeout
        out, err = bytearray(), bytearray()
        try:
            channel.exec_command(command)
            if stdin:
                channel.settimeout(timeout)
                _send_all(channel, stdin)
            channel.shutdown_write()  # EOF on the command's stdin, so nothing waits for input
            while True:
                while channel.recv_ready():
                    out += channel.recv(65536)
                while channel.recv_stderr_ready():
                    err += channel.recv_stderr(65536)
                drained = not channel.recv_ready() and not channel.recv_stderr_ready()
                if drained and (channel.closed or (channel.exit_status_ready() and channel.eof_received)):
                    # paramiko reports -1 both when sshd sent no exit-status (a signal killed the
                    # command) and when the connection died: only a live connection means "it ended".
                    rc = channel.exit_status if channel.exit_status_ready() else -1
                    if rc == -1:
                        if not alive(channel.get_transport()):
                            raise _Unknown("the connection dropped before it finished")
                        err += b"remote command ended without an exit status (killed by a signal?)\n"
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise _Unknown(f"no result within {timeout:g} s")
                select.select([channel], [], [], min(remaining, 1.0))
        except (OSError, EOFError, paramiko.SSHException) as exc:
            raise _Unknown(describe(exc)) from exc
        return CommandResult(rc, strip_preamble(decode_output(bytes(out))), strip_preamble(decode_output(bytes(err))))

    # ---- files (SFTP; every operation here is idempotent, so one reconnect is safe)

    def _with_sftp(self, op: Callable[[Any], _T]) -> _T:
        import paramiko

        for attempt in (1, 2):
            with self._lock:
                try:
                    if self._sftp is None:
                        sftp = paramiko.SFTPClient.from_transport(self._transport())
                        if sftp is None:  # the server refused the SFTP subsystem
                            raise paramiko.SSHException("the server offers no SFTP")
                        sftp.get_channel().settimeout(max(self.connect_timeout, 30.0))
                        self._sftp = sftp
                    return op(self._sftp)
                except (EOFError, paramiko.SSHException, OSError) as exc:
                    if (
                        isinstance(exc, OSError)
                        and not isinstance(exc, (ConnectionError, socket.timeout))
                        and self._transports
                        and alive(self._transports[-1])
                    ):
                        raise  # the file's own answer (no such file, permission denied, SFTP "Failure")
                    self._drop()  # paramiko says "Socket is closed" (an OSError without errno) when sshd went away
                    if attempt == 2:
                        raise transport_error(f"file transfer with {self.host} failed: {describe(exc)}") from exc
        raise AssertionError("unreachable: the second attempt returns or raises")

    def resolve_path(self, path: str) -> str:
        if self._home is None:
            self._home = self._with_sftp(lambda s: s.normalize("."))
        if path == "~" or path.startswith("~/"):
            path = self._home + path[1:]
        elif not path.startswith("/"):
            path = posixpath.join(self._home, path)
        return posixpath.normpath(path)

    def put_text(self, path: str, text: str, mode: int = 0o644) -> None:
        path = self.resolve_path(path)
        self._with_sftp(lambda sftp: sftp_files.write_atomically(sftp, path, text, mode))

    def put_private(self, path: str, data: bytes) -> None:
        """A new file only this user can read, never with wider permissions (sftp_files.create_private)."""
        path = self.resolve_path(path)
        self._with_sftp(lambda sftp: sftp_files.create_private(sftp, path, data, self.host))

    def read_from(self, path: str, offset: int, limit: int = 1 << 20) -> bytes:
        path = self.resolve_path(path)
        return self._with_sftp(lambda sftp: sftp_files.read_regular(sftp, path, offset, limit))

    def size(self, path: str) -> Optional[int]:
        path = self.resolve_path(path)
        return self._with_sftp(lambda sftp: sftp_files.size_or_none(sftp, path))

    def remove(self, path: str) -> None:
        path = self.resolve_path(path)
        self._with_sftp(lambda sftp: sftp_files.remove_if_there(sftp, path))

    def close(self) -> None:
        self._drop()


def _send_all(channel: Any, data: bytes) -> None:
    """Send `data` on the command's stdin. A command that exits before reading it all (a file it
    could not write) closes the channel: its result is still to be read, so that is no error."""
    offset = 0
    while offset < len(data):
        try:
            sent = channel.send(data[offset : offset + 32768])
        except OSError:  # socket.timeout too: a far end that neither reads nor exits
            if channel.exit_status_ready():
                return
            raise
        if sent == 0:  # the channel closed: its exit status (or a lost connection) tells which
            return
        offset += sent
