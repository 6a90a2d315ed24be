"""The file operations SSHTransport runs on an open SFTP session, each idempotent (so one
reconnect and retry is safe): a file written atomically, a new private file created 0600 by
its open request, a regular file read (never a FIFO), a size, a removal. paramiko only inside."""

from __future__ import annotations

import posixpath
import uuid
from typing import Any, Optional

from .base import transport_error


def write_atomically(sftp: Any, path: str, text: str, mode: int) -> None:
    """`text` to `path` through a temporary file beside it, renamed into place (its parents made)."""
    parent = posixpath.dirname(path)
    tmp = posixpath.join(parent, f".{posixpath.basename(path)}.{uuid.uuid4().hex[:12]}.tmp")
    makedirs(sftp, parent)
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


def create_private(sftp: Any, path: str, data: bytes, host: str) -> None:
    """A new file only this user can read: the SFTP open request itself carries mode 0600 (with
    O_EXCL), so the file never exists with wider permissions. The directory must exist."""
    from paramiko.sftp import CMD_HANDLE, CMD_OPEN, SFTP_FLAG_CREATE, SFTP_FLAG_EXCL, SFTP_FLAG_WRITE, SFTPError
    from paramiko.sftp_attr import SFTPAttributes
    from paramiko.sftp_file import SFTPFile

    attrs = SFTPAttributes()
    attrs.st_mode = 0o600
    kind, msg = sftp._request(CMD_OPEN, path, SFTP_FLAG_WRITE | SFTP_FLAG_CREATE | SFTP_FLAG_EXCL, attrs)
    if kind != CMD_HANDLE:
        raise SFTPError("Expected handle")
    with SFTPFile(sftp, msg.get_binary(), "wb") as fh:
        fh.write(data)
    if sftp.stat(path).st_mode & 0o077:  # a server that ignored the requested mode
        sftp.remove(path)
        raise transport_error(
            f"the SFTP server on {host} did not create {path} with mode 0600",
            hint="--pass-env needs a server that honours the mode of a new file (OpenSSH does)",
        )


def read_regular(sftp: Any, path: str, offset: int, limit: int) -> bytes:
    """Up to `limit` bytes from `offset` of a regular file."""
    import errno
    import stat

    from ..paths import NotAUserFile

    # the server's open() of a FIFO would wait for a writer, holding the session: only a regular file
    mode = sftp.stat(path).st_mode
    if mode is not None and not stat.S_ISREG(mode):
        raise NotAUserFile(errno.EINVAL, "is not a regular file but a directory, device, FIFO or socket", path)
    with sftp.open(path, "rb") as fh:
        fh.seek(offset)
        data: bytes = fh.read(limit)
        return data


def size_or_none(sftp: Any, path: str) -> Optional[int]:
    try:
        size: Optional[int] = sftp.stat(path).st_size
        return size
    except FileNotFoundError:
        return None


def remove_if_there(sftp: Any, path: str) -> None:
    try:
        sftp.remove(path)
    except FileNotFoundError:
        pass


def makedirs(sftp: Any, path: str) -> None:
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
