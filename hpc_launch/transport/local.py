"""This machine: subprocess without a shell, files through the OS."""

from __future__ import annotations

import os
import shlex
import subprocess
import tempfile
from typing import Mapping, Optional, Sequence

from .base import CommandResult, check_env_names, decode_output, transport_error

# Login names that mean "this machine, no SSH".
LOCAL_NAMES = ("", "localhost")


class LocalTransport:
    """This machine: subprocess without a shell, so arguments are never re-parsed."""

    host = "localhost"

    def run(
        self,
        argv: Sequence[str],
        *,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, Optional[str]]] = None,
        timeout: float = 60.0,
        stdin: Optional[str] = None,
    ) -> CommandResult:
        check_env_names(env)
        full_env = None
        if env:  # a None value removes the variable (--pass-env names never reach the submit command)
            full_env = {k: v for k, v in {**os.environ, **env}.items() if v is not None}
        workdir = os.path.expanduser(cwd) if cwd else None
        if workdir is not None and not os.path.isdir(workdir):
            return CommandResult(1, "", f"cd: {cwd}: No such file or directory\n")
        try:
            proc = subprocess.run(
                list(argv),
                cwd=workdir,
                env=full_env,
                timeout=timeout,
                capture_output=True,
                input=stdin.encode() if stdin is not None else None,
                stdin=subprocess.DEVNULL if stdin is None else None,
            )
        except subprocess.TimeoutExpired as exc:
            raise transport_error(
                f"`{shlex.join(argv)}` did not finish within {timeout:g} s and was killed",
                hint="it may have taken effect; check before retrying",
                maybe_ran=True,
            ) from exc
        except FileNotFoundError:
            return CommandResult(127, "", f"{argv[0]}: command not found\n")
        except PermissionError:
            return CommandResult(126, "", f"{argv[0]}: permission denied\n")
        return CommandResult(proc.returncode, decode_output(proc.stdout), decode_output(proc.stderr))

    def put_text(self, path: str, text: str, mode: int = 0o644) -> None:
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

    def put_private(self, path: str, data: bytes) -> None:
        """A new file only this user can read, 0600 from its creation (O_EXCL: never through an
        existing file or symlink); the directory must exist."""
        fd = os.open(self.resolve_path(path), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)

    def read_from(self, path: str, offset: int, limit: int = 1 << 20) -> bytes:
        from ..paths import read_regular  # a FIFO or a device where a job's file should be: refused, never waited on

        return read_regular(self.resolve_path(path), offset, limit)

    def size(self, path: str) -> Optional[int]:
        try:
            return os.stat(self.resolve_path(path)).st_size
        except (FileNotFoundError, NotADirectoryError):  # x/bin/activate where x is a file: no such file
            return None

    def remove(self, path: str) -> None:
        try:
            os.unlink(self.resolve_path(path))
        except FileNotFoundError:
            pass

    def resolve_path(self, path: str) -> str:
        return os.path.abspath(os.path.expanduser(path))

    def close(self) -> None:
        pass
