"""The stream of node-local staging (hpc_launch/stage.py): node 0 reads the source as a tar stream,
every node forwards each chunk to its children before unpacking it itself, and hashes what it got.
Standard library only: it runs inside jobs, before the environment is usable."""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
import tempfile
from typing import IO, Dict, List, Optional, Tuple

from .stage_nodes import StageError, entry_name
from .stage_wire import ABORT, CHUNK, END, LEN, TRAILER, failure_word, recv_exact, recv_word


class Fanout:
    """Sends each chunk to every child as a frame; a child that drops is named."""

    def __init__(self, kids: Dict[int, socket.socket], hosts: List[str]):
        self.kids = kids
        self.hosts = hosts

    def _each(self, data: bytes) -> None:
        for idx, sock in self.kids.items():
            try:
                sock.sendall(data)
            except OSError as err:
                why = failure_word(sock)  # a child that failed said why before it closed
                raise StageError(
                    why or f"{self.hosts[idx]} dropped the staging stream: {err.strerror or err}"
                ) from None

    def chunk(self, data: bytes) -> None:
        if data:
            self._each(LEN.pack(len(data)) + data)

    def end(self, trailer: bytes) -> None:
        self._each(LEN.pack(END) + trailer)

    def abort(self, message: str) -> None:
        raw = message.encode("utf-8", "replace")[:4000]
        for sock in self.kids.values():
            try:
                sock.sendall(LEN.pack(ABORT) + LEN.pack(len(raw)) + raw)
            except OSError:
                pass


class Source:
    """The chunks this node receives: from its parent's socket, or (node 0) from the tar of SRC."""

    def __init__(self, sock: Optional[socket.socket], parent_host: str, idle_s: float):
        self.sock = sock
        self.parent_host = parent_host
        self.idle_s = idle_s
        self.trailer: Optional[bytes] = None
        self._tar: Optional["subprocess.Popen[bytes]"] = None
        self._err: Optional[IO[bytes]] = None

    def from_tar(self, src: str, entry: bool = False) -> None:
        """The system tar writes the stream (several times faster than tarfile on a venv's ~40k files):
        SRC's contents, or with `entry` SRC itself (an image file or directory) under its real name."""
        if entry:
            real = os.path.realpath(src)  # a link to the image: the image, never the link, is copied
            where, names = os.path.dirname(real), [entry_name(src)]
        else:
            where, names = src, ["."]
        self._err = tempfile.TemporaryFile()
        self._tar = subprocess.Popen(["tar", "-C", where, "-cf", "-", *names], stdout=subprocess.PIPE, stderr=self._err)

    def next(self) -> Optional[bytes]:
        """The next chunk, or None at the end of the stream."""
        if self._tar is not None:
            assert self._tar.stdout is not None
            data = self._tar.stdout.read(CHUNK)
            if data:
                return data
            code = self._tar.wait()
            if code == 1:  # GNU tar: a file changed while it was read (a .pyc written); what was sent is checked
                print(f"[hpc-launch] stage: note: {_said(self._err, 'tar -c')}", file=sys.stderr, flush=True)
            elif code != 0:
                raise StageError(f"reading the source failed: {_said(self._err, 'tar -c')}")
            return None
        assert self.sock is not None
        self.sock.settimeout(self.idle_s)
        try:
            (n,) = LEN.unpack(recv_exact(self.sock, 4))
            if n == END:
                self.trailer = recv_exact(self.sock, TRAILER.size)
                return None
            if n == ABORT:
                raise StageError(recv_word(self.sock))
            if n > CHUNK:  # checked before a byte of it is read: a node never holds what a stranger announces
                raise StageError(f"{self.parent_host} announced a frame of {n} bytes: staging sends at most {CHUNK}")
            return recv_exact(self.sock, n)
        except socket.timeout:
            raise StageError(f"{self.parent_host} sent nothing for {self.idle_s:.0f} s") from None
        except (EOFError, OSError):
            raise StageError(f"{self.parent_host} closed the staging stream early (failed or killed)") from None


def _said(err: Optional[IO[bytes]], what: str) -> str:
    """The last line a tar wrote on its stderr (a temporary file: a full pipe would block it)."""
    if err is None:
        return what
    err.seek(0)
    lines = err.read().decode("utf-8", "replace").strip().splitlines()
    return f"{what}: {lines[-1]}" if lines else f"{what} failed"


def receive(source: Source, fanout: Fanout, into: str) -> Tuple[int, bytes]:
    """Each chunk is forwarded to the children first, then hashed and unpacked here by the system
    tar, so the tree pipelines. Returns (bytes, sha256)."""
    sha = hashlib.sha256()
    size = 0
    with tempfile.TemporaryFile() as err:
        tar = subprocess.Popen(["tar", "-C", into, "-xf", "-"], stdin=subprocess.PIPE, stderr=err)
        assert tar.stdin is not None
        try:
            while True:
                data = source.next()
                if data is None:
                    break
                fanout.chunk(data)
                sha.update(data)
                size += len(data)
                tar.stdin.write(data)
            tar.stdin.close()
        except BrokenPipeError:
            tar.wait()
            raise StageError(f"unpacking into {into} failed: {_said(err, 'tar -x')}") from None
        except BaseException:
            tar.kill()
            tar.wait()
            raise
        if tar.wait() != 0:
            raise StageError(f"unpacking into {into} failed: {_said(err, 'tar -x')}")
    return size, sha.digest()
