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
"""

from __future__ import annotations

import base64
import getpass
import logging
import os
import posixpath
import re
import select
import shlex
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Mapping, Optional, Protocol, Sequence

from hpc_launch.errors import HostKeyError, TransportError

log = logging.getLogger(__name__)

LOCAL_NAMES = ("", "localhost")
# Printed just before the command so that whatever a login script prints (banners, module
# messages, conda init) can be cut off stdout and stderr before anyone parses them.
SENTINEL = "__hpc_launch_output_begins_3f9c1b__"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Characters that every login shell (sh, bash, zsh, ksh, csh, tcsh, fish) reads literally
# inside single quotes. Anything else is sent base64-encoded instead.
_PORTABLE = re.compile(r"^[ -~]*$")
_NOT_PORTABLE_IN_QUOTES = set("!\\")


@dataclass(frozen=True)
class CommandResult:
    rc: int
    out: str
    err: str


class Transport(Protocol):
    host: str

    def run(self, argv: Sequence[str], *, cwd: Optional[str] = None, env: Optional[Mapping[str, str]] = None,
            timeout: float = 60.0, stdin: Optional[str] = None) -> CommandResult: ...

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


def _check_env_names(env: Optional[Mapping[str, str]]) -> None:
    for name in env or {}:
        if not _ENV_NAME.match(name):
            raise ValueError(f"not a valid environment variable name: {name!r}")


# --------------------------------------------------------------------------- local


class LocalTransport:
    """This machine: subprocess without a shell, so arguments are never re-parsed."""

    host = "localhost"

    def run(self, argv, *, cwd=None, env=None, timeout=60.0, stdin=None) -> CommandResult:
        _check_env_names(env)
        full_env = None
        if env:  # a None value removes the variable (--pass-env names never reach the submit command)
            full_env = {k: v for k, v in {**os.environ, **env}.items() if v is not None}
        workdir = os.path.expanduser(cwd) if cwd else None
        if workdir is not None and not os.path.isdir(workdir):
            return CommandResult(1, "", f"cd: {cwd}: No such file or directory\n")
        try:
            proc = subprocess.run(
                list(argv), cwd=workdir, env=full_env, timeout=timeout, capture_output=True,
                input=stdin.encode() if stdin is not None else None,
                stdin=subprocess.DEVNULL if stdin is None else None,
            )
        except subprocess.TimeoutExpired:
            raise transport_error(f"`{shlex.join(argv)}` did not finish within {timeout:g} s and was killed",
                                  hint="it may have taken effect; check before retrying", maybe_ran=True)
        except FileNotFoundError:
            return CommandResult(127, "", f"{argv[0]}: command not found\n")
        except PermissionError:
            return CommandResult(126, "", f"{argv[0]}: permission denied\n")
        return CommandResult(proc.returncode, _text(proc.stdout), _text(proc.stderr))

    def put_text(self, path, text, mode=0o644) -> None:
        path = self.resolve_path(path)
        parent = os.path.dirname(path)
        os.makedirs(parent, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=parent, prefix=f".{os.path.basename(path)}.")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
                os.fchmod(fh.fileno(), mode)
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise

    def put_private(self, path, data) -> None:
        """A new file only this user can read, 0600 from its creation (O_EXCL: never through an
        existing file or symlink); the directory must exist."""
        fd = os.open(self.resolve_path(path), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)

    def read_from(self, path, offset, limit=1 << 20) -> bytes:
        with open(self.resolve_path(path), "rb") as fh:
            fh.seek(offset)
            return fh.read(limit)

    def size(self, path) -> Optional[int]:
        try:
            return os.stat(self.resolve_path(path)).st_size
        except FileNotFoundError:
            return None

    def remove(self, path) -> None:
        try:
            os.unlink(self.resolve_path(path))
        except FileNotFoundError:
            pass

    def resolve_path(self, path) -> str:
        return os.path.abspath(os.path.expanduser(path))

    def close(self) -> None:
        pass


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


# --------------------------------------------------------------------------- ssh


def wrap_remote_command(argv: Sequence[str], cwd: Optional[str] = None,
                        env: Optional[Mapping[str, str]] = None) -> str:
    """The exact string handed to the remote sshd (which gives it to the user's login shell)."""
    if not argv:
        raise ValueError("empty command")
    _check_env_names(env)
    steps = []
    if cwd:
        # A remote command starts in the home directory, so "~/x" is just "x".
        rel = cwd[2:] if cwd.startswith("~/") else ("" if cwd == "~" else cwd)
        if rel:
            steps.append(f"cd {shlex.quote(rel)}")
    unset = [k for k, v in (env or {}).items() if v is None]
    exports = {k: v for k, v in (env or {}).items() if v is not None}
    if unset:  # names only: a login script may export them, the submit command must not see them
        steps.append("unset " + " ".join(unset))
    if exports:
        steps.append("export " + " ".join(f"{k}={shlex.quote(str(v))}" for k, v in exports.items()))
    steps.append(f"exec {shlex.join(argv)}")
    inner = f"echo {SENTINEL}; echo {SENTINEL} >&2; " + " && ".join(steps)
    quoted = shlex.quote(inner)
    if _PORTABLE.match(quoted) and not (_NOT_PORTABLE_IN_QUOTES & set(quoted)):
        return f"bash -lc {quoted}"
    # Newlines, "!", backslashes or non-ASCII: csh/tcsh/fish would mangle them even inside
    # single quotes, so ship the command as base64, which every shell passes through intact.
    b64 = base64.b64encode(inner.encode()).decode()
    return f"bash -lc 'eval \"$(printf %s {b64} | base64 -d)\"'"


def _strip_preamble(text: str) -> str:
    marker = SENTINEL + "\n"
    return text.split(marker, 1)[1] if marker in text else text


@dataclass
class _Hop:
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


class _Unknown(Exception):
    """Raised inside run() once a command was sent and its outcome is unknown."""


class SSHTransport:
    """A login node over SSH. Lazily connects; the one connection is reused until close()."""

    def __init__(self, host: str, *, ssh_config: Optional[str] = None, known_hosts: Optional[str] = None,
                 connect_timeout: float = 10.0, retries: int = 3, backoff: float = 0.5):
        import paramiko  # noqa: F401  (fail early and clearly if missing)

        self.host = host
        self.ssh_config_path = os.path.expanduser(
            ssh_config or os.environ.get("HPC_LAUNCH_SSH_CONFIG") or "~/.ssh/config")
        override = known_hosts or os.environ.get("HPC_LAUNCH_KNOWN_HOSTS")
        self.known_hosts_override = os.path.expanduser(override) if override else None
        self.connect_timeout = connect_timeout
        self.retries = retries
        self.backoff = backoff
        self.connects = 0            # connections established (tests and benches read these)
        self.connect_attempts = 0
        self._lock = threading.RLock()
        self._transports: list = []  # jump hosts first, the login node last
        self._sftp = None
        self._home: Optional[str] = None
        self._config = self._load_config()

    # ---- configuration

    def _load_config(self):
        import paramiko

        if os.path.exists(self.ssh_config_path):
            return paramiko.SSHConfig.from_path(self.ssh_config_path)
        return paramiko.SSHConfig.from_text("")

    def _hop(self, spec: str) -> _Hop:
        """One hop from an alias or a ProxyJump entry ([user@]host[:port] or ssh://...)."""
        user = port = None
        if spec.startswith("ssh://"):
            spec = spec[len("ssh://"):]
        if "@" in spec:
            user, spec = spec.rsplit("@", 1)
        if spec.count(":") == 1:
            spec, port = spec.split(":")
        cfg = self._config.lookup(spec)
        if self.known_hosts_override:
            known = [self.known_hosts_override]
        else:
            user_files = (cfg.get("userknownhostsfile") or "~/.ssh/known_hosts ~/.ssh/known_hosts2").split()
            global_files = (cfg.get("globalknownhostsfile")
                            or "/etc/ssh/ssh_known_hosts /etc/ssh/ssh_known_hosts2").split()
            known = user_files + global_files
        timeout = cfg.get("connecttimeout")
        return _Hop(
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

    def _route(self, alias: str, depth: int = 0) -> list:
        """Hops to reach `alias`, first to last (ProxyJump a,b -> [a, b, alias])."""
        if depth > 8:
            raise transport_error(f"ProxyJump chain for {self.host} is too deep (a loop in ssh config?)")
        target = self._hop(alias)
        jump = self._config.lookup(target.alias).get("proxyjump", "none")
        if jump.lower() == "none":
            return [target]
        specs = [s.strip() for s in jump.split(",") if s.strip()]
        first = self._route(specs[0], depth + 1)  # the first jump may itself need a jump
        return first + [self._hop(s) for s in specs[1:]] + [target]

    # ---- connecting

    def _connect_once(self) -> list:
        import paramiko

        self.connect_attempts += 1
        transports: list = []
        try:
            for hop in self._route(self.host):
                timeout = hop.connect_timeout or self.connect_timeout
                if transports:
                    sock = transports[-1].open_channel(
                        "direct-tcpip", (hop.hostname, hop.port), ("127.0.0.1", 0), timeout=timeout)
                elif hop.proxy_command:
                    sock = paramiko.ProxyCommand(hop.proxy_command)
                else:
                    sock = socket.create_connection((hop.hostname, hop.port), timeout=timeout)
                t = paramiko.Transport(sock)
                transports.append(t)
                t.banner_timeout = t.auth_timeout = timeout
                known = self._known_keys(hop)
                self._prefer_known_key_types(t, known)
                t.start_client(timeout=timeout)
                self._verify_host_key(hop, t.get_remote_server_key(), known)
                self._authenticate(hop, t)
                t.set_keepalive(30)  # long `logs -f` sessions survive idle-killing firewalls
            return transports
        except BaseException:
            for t in reversed(transports):
                t.close()
            raise

    def _connect(self) -> None:
        """Connect with bounded retries; only transient failures are retried."""
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
                if attempt == self.retries:
                    raise transport_error(
                        f"cannot connect to {self.host}: {_describe(exc)} "
                        f"(after {attempt + 1} attempt{'s' if attempt else ''})",
                        hint=f"check that `ssh {self.host}` works from this machine")
                log.debug("connect to %s failed (%s); retrying in %.1f s", self.host, _describe(exc), delay)
                time.sleep(delay)
                delay *= 2

    def _transport(self):
        with self._lock:
            if not (self._transports and self._transports[-1].is_active()):
                self._drop()
                try:
                    self._connect()
                except socket.gaierror as exc:
                    raise transport_error(f"cannot resolve {self.host}: {exc.strerror}",
                                          hint="check the host name or its HostName in ssh config")
                except self._paramiko().AuthenticationException as exc:
                    raise transport_error(f"ssh authentication to {self.host} failed: {exc}",
                                          hint="load your key into ssh-agent or set IdentityFile in ssh config")
            return self._transports[-1]

    @staticmethod
    def _paramiko():
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

    # ---- host keys

    def _known_keys(self, hop: _Hop) -> dict:
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

    @staticmethod
    def _prefer_known_key_types(t, known: dict) -> None:
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

    def _verify_host_key(self, hop: _Hop, key, known: dict) -> None:
        name = hop.known_hosts_name
        ssh_cmd = f"ssh {hop.alias}" if self._is_default_config() else f"ssh -F {self.ssh_config_path} {hop.alias}"
        if not known:
            raise HostKeyError(
                f"host key for {hop.alias} ({name}, {key.get_name()} {key.fingerprint}) is not in known_hosts",
                hint=f"run `{ssh_cmd}` once to verify and accept it")
        entry = known.get(key.get_name())
        if entry is not None and entry[0] == key:
            return
        path = entry[1] if entry else next(iter(known.values()))[1]
        file_arg = "" if path == os.path.expanduser("~/.ssh/known_hosts") else f" -f {shlex.quote(path)}"
        raise HostKeyError(
            f"host key for {hop.alias} ({name}) CHANGED: the server sent {key.get_name()} {key.fingerprint}, "
            f"{path} has a different one; possible man-in-the-middle attack",
            hint=f"if the change is expected remove the old key with "
                 f"`ssh-keygen -R {shlex.quote(name)}{file_arg}` and run `{ssh_cmd}` to accept the new one")

    def _is_default_config(self) -> bool:
        return self.ssh_config_path == os.path.expanduser("~/.ssh/config")

    # ---- authentication

    def _authenticate(self, hop: _Hop, t) -> None:
        import paramiko

        allowed = ["publickey", "keyboard-interactive", "password"]
        for key in self._keys(hop):
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

    @staticmethod
    def _keys(hop: _Hop) -> list:
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

    # ---- commands

    def run(self, argv, *, cwd=None, env=None, timeout=60.0, stdin=None) -> CommandResult:
        import paramiko

        command = wrap_remote_command(argv, cwd, env)
        shown = shlex.join(argv)  # never the env values: they may hold secrets
        for attempt in (1, 2):
            t = self._transport()
            try:
                channel = t.open_session(timeout=self.connect_timeout)
                break
            except (OSError, EOFError, paramiko.SSHException) as exc:
                self._drop()  # nothing was sent yet: reconnect and try once more
                if attempt == 2:
                    raise transport_error(f"cannot open a session on {self.host}: {_describe(exc)}")
        try:
            return self._exchange(channel, command, stdin, timeout)
        except _Unknown as exc:
            self._drop()
            raise transport_error(f"lost `{shown}` on {self.host}: {exc}",
                                  hint="it may have run; check (e.g. `hpc-launch list`) before retrying",
                                  maybe_ran=True)
        finally:
            channel.close()

    def _exchange(self, channel, command: str, stdin: Optional[str], timeout: float) -> CommandResult:
        import paramiko

        deadline = time.monotonic() + timeout
        out, err = bytearray(), bytearray()
        try:
            channel.exec_command(command)
            if stdin is not None:
                channel.sendall(stdin.encode())
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
                        if not _alive(channel.get_transport()):
                            raise _Unknown("the connection dropped before it finished")
                        err += b"remote command ended without an exit status (killed by a signal?)\n"
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise _Unknown(f"no result within {timeout:g} s")
                select.select([channel], [], [], min(remaining, 1.0))
        except (OSError, EOFError, paramiko.SSHException) as exc:
            raise _Unknown(_describe(exc))
        return CommandResult(rc, _strip_preamble(_text(bytes(out))), _strip_preamble(_text(bytes(err))))

    # ---- files (SFTP; every operation here is idempotent, so one reconnect is safe)

    def _with_sftp(self, op):
        import paramiko

        for attempt in (1, 2):
            with self._lock:
                try:
                    if self._sftp is None:
                        self._sftp = paramiko.SFTPClient.from_transport(self._transport())
                        self._sftp.get_channel().settimeout(max(self.connect_timeout, 30.0))
                    return op(self._sftp)
                except (EOFError, paramiko.SSHException, OSError) as exc:
                    if (isinstance(exc, OSError) and not isinstance(exc, (ConnectionError, socket.timeout))
                            and self._transports and _alive(self._transports[-1])):
                        raise  # the file's own answer (no such file, permission denied, SFTP "Failure")
                    self._drop()  # paramiko says "Socket is closed" (an OSError without errno) when sshd went away
                    if attempt == 2:
                        raise transport_error(f"file transfer with {self.host} failed: {_describe(exc)}")

    def resolve_path(self, path) -> str:
        if self._home is None:
            self._home = self._with_sftp(lambda s: s.normalize("."))
        if path == "~" or path.startswith("~/"):
            path = self._home + path[1:]
        elif not path.startswith("/"):
            path = posixpath.join(self._home, path)
        return posixpath.normpath(path)

    def put_text(self, path, text, mode=0o644) -> None:
        path = self.resolve_path(path)
        parent = posixpath.dirname(path)
        tmp = posixpath.join(parent, f".{posixpath.basename(path)}.{uuid.uuid4().hex[:12]}.tmp")

        def op(sftp):
            _sftp_makedirs(sftp, parent)
            try:
                with sftp.open(tmp, "wb") as fh:
                    fh.write(text.encode("utf-8"))
                sftp.chmod(tmp, mode)
                sftp.posix_rename(tmp, path)
            except BaseException:
                try:
                    sftp.remove(tmp)
                except OSError:
                    pass
                raise

        self._with_sftp(op)

    def put_private(self, path, data) -> None:
        """A new file only this user can read: the SFTP open request itself carries mode 0600
        (with O_EXCL), so the file never exists with wider permissions. The directory must exist."""
        from paramiko.sftp import CMD_HANDLE, CMD_OPEN, SFTP_FLAG_CREATE, SFTP_FLAG_EXCL, SFTP_FLAG_WRITE, SFTPError
        from paramiko.sftp_attr import SFTPAttributes
        from paramiko.sftp_file import SFTPFile

        path = self.resolve_path(path)
        attrs = SFTPAttributes()
        attrs.st_mode = 0o600

        def op(sftp):
            kind, msg = sftp._request(CMD_OPEN, path, SFTP_FLAG_WRITE | SFTP_FLAG_CREATE | SFTP_FLAG_EXCL, attrs)
            if kind != CMD_HANDLE:
                raise SFTPError("Expected handle")
            with SFTPFile(sftp, msg.get_binary(), "wb") as fh:
                fh.write(data)
            if sftp.stat(path).st_mode & 0o077:  # a server that ignored the requested mode
                sftp.remove(path)
                raise transport_error(f"the SFTP server on {self.host} did not create {path} with mode 0600",
                                      hint="--pass-env needs a server that honours the mode of a new file (OpenSSH does)")

        self._with_sftp(op)

    def read_from(self, path, offset, limit=1 << 20) -> bytes:
        path = self.resolve_path(path)

        def op(sftp):
            with sftp.open(path, "rb") as fh:
                fh.seek(offset)
                return fh.read(limit)

        return self._with_sftp(op)

    def size(self, path) -> Optional[int]:
        path = self.resolve_path(path)

        def op(sftp):
            try:
                return sftp.stat(path).st_size
            except FileNotFoundError:
                return None

        return self._with_sftp(op)

    def remove(self, path) -> None:
        path = self.resolve_path(path)

        def op(sftp):
            try:
                sftp.remove(path)
            except FileNotFoundError:
                pass

        self._with_sftp(op)

    def close(self) -> None:
        self._drop()


def _alive(t) -> bool:
    """Whether the connection still answers (a round trip, not just paramiko's flag)."""
    if t is None or not t.is_active():
        return False
    try:
        t.global_request("keepalive@openssh.com", wait=True)  # sshd answers failure; any answer will do
    except (OSError, EOFError):
        return False
    return t.is_active()


def _sftp_makedirs(sftp, path: str) -> None:
    missing = []
    while path not in ("", "/"):
        try:
            sftp.stat(path)
            break
        except FileNotFoundError:
            missing.append(path)
            path = posixpath.dirname(path)
    for p in reversed(missing):
        try:
            sftp.mkdir(p)
        except OSError:
            sftp.stat(p)  # created meanwhile by someone else is fine; anything else re-raises


def _prompt_handler(hop: _Hop):
    """Keyboard-interactive (two-factor) prompts, asked on the terminal; answers never logged."""

    def handler(title, instructions, prompts):
        for line in (title, instructions):
            if line:
                print(line, file=sys.stderr)
        return [getpass.getpass(f"[{hop.alias}] {p}") if not echo else input(f"[{hop.alias}] {p}")
                for p, echo in prompts]

    return handler


def _describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return " ".join(text.split())


# --------------------------------------------------------------------------- factory

_cache: dict = {}
_cache_lock = threading.Lock()


def open_transport(login: Optional[str], **kw) -> Transport:
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
