"""The wire of node-local staging (hpc_launch/stage.py): the frames a node sends its children, the
words a child answers with, and the tree's connections, each proven by the job's token.

A frame is a 4-byte length and at most CHUNK bytes; length END closes the stream and the trailer
(size, sha256, HMAC) follows; ABORT carries a failure's message instead. No frame or message larger
than its bound is read: a node never holds what a stranger announces.
Standard library only: it runs inside jobs, before the environment is usable."""

from __future__ import annotations

import hashlib
import hmac
import socket
import struct
import time
from typing import Dict, List, Optional, Tuple

from .stage_nodes import StageError

MAGIC = b"HPCSTG1\n"
CHUNK = 1 << 20  # bytes per frame: large enough that per-frame costs vanish, small enough to pipeline
LEN = struct.Struct("!I")
END = 0  # frame length 0: the stream ends, the trailer follows
ABORT = 0xFFFFFFFF  # the sender failed: a message follows, the receiver fails naming it
TRAILER = struct.Struct("!Q32s32s")  # total size, sha256 of the stream, HMAC(token, size || sha256)
ACK_OK = b"K"
ACK_FAIL = b"F"
COMMIT = b"C"


def mac(token: bytes, *parts: bytes) -> bytes:
    return hmac.new(token, b"\0".join(parts), hashlib.sha256).digest()


def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        got = sock.recv(n - len(buf))
        if not got:
            raise EOFError
        buf += got
    return bytes(buf)


MAX_WORD = 4096  # a failure's message: senders cut theirs at 4000 bytes


def recv_word(sock: socket.socket) -> str:
    """A length-prefixed failure message, its length checked before it is read."""
    (m,) = LEN.unpack(recv_exact(sock, 4))
    if m > MAX_WORD:
        raise StageError(f"a peer announced a {m}-byte message: not one of staging's")
    return recv_exact(sock, m).decode("utf-8", "replace")


def listen(host: str, port: int, addr: Optional[str] = None) -> socket.socket:
    """Listen on this node's address in the tree (every address when its name does not resolve)."""
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        try:
            bind = addr or socket.gethostbyname(host)
        except OSError:
            bind = "0.0.0.0"
        srv.bind((bind, port))
    except OSError as err:
        srv.close()
        raise StageError(f"cannot listen on {host}:{port}: {err.strerror or err}") from None
    srv.listen(8)
    return srv


HELLO_S = 5.0  # a connection proves the job's token within this, or is dropped: a stranger never holds a node
MAX_PENDING = 128  # connections still saying hello; past it the oldest is dropped


def accept_children(
    srv: socket.socket, want: Dict[int, str], token: bytes, deadline: float, hello_s: float = HELLO_S
) -> Dict[int, socket.socket]:
    """The children's connections, each proven by its hello (HMAC under the job's token). Hellos
    are read side by side, each within `hello_s`: a silent or dripping stranger (no token) is
    dropped at its own deadline without delaying a real child that connects after it."""
    import selectors

    size = len(MAGIC) + 4 + 32
    got: Dict[int, socket.socket] = {}
    pending: Dict[socket.socket, Tuple[float, bytearray]] = {}
    sel = selectors.DefaultSelector()
    srv.setblocking(False)
    sel.register(srv, selectors.EVENT_READ)

    def drop(conn: socket.socket) -> None:
        sel.unregister(conn)
        pending.pop(conn, None)
        conn.close()

    try:
        while len(got) < len(want):
            now = time.monotonic()
            if now >= deadline:
                missing = ", ".join(h for i, h in want.items() if i not in got)
                raise StageError(f"{missing} did not connect for staging (not started, or port blocked)")
            for conn, (until, _) in list(pending.items()):
                if now >= until:
                    drop(conn)  # no proof in time: another job's node, or a stranger
            wake = min([deadline, *(until for until, _ in pending.values())])
            for key, _ in sel.select(max(0.0, wake - now)):
                if key.fileobj is srv:
                    try:
                        conn, _ = srv.accept()
                    except OSError:
                        continue
                    conn.setblocking(False)
                    if len(pending) >= MAX_PENDING:
                        drop(min(pending, key=lambda c: pending[c][0]))
                    pending[conn] = (time.monotonic() + hello_s, bytearray())
                    sel.register(conn, selectors.EVENT_READ)
                    continue
                conn = key.fileobj  # type: ignore[assignment]
                buf = pending[conn][1]
                try:
                    data = conn.recv(size - len(buf))
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if not data:
                    drop(conn)
                    continue
                buf += data
                if len(buf) < size:
                    continue
                sel.unregister(conn)
                del pending[conn]
                hello = bytes(buf)
                (idx,) = struct.unpack("!I", hello[len(MAGIC) : len(MAGIC) + 4])
                ok = hello.startswith(MAGIC) and idx in want and idx not in got
                if not ok or not hmac.compare_digest(hello[-32:], mac(token, b"child", str(idx).encode())):
                    conn.close()  # another job's node, or a stranger: not ours to feed
                    continue
                conn.setblocking(True)
                conn.settimeout(None)
                got[idx] = conn
    finally:
        for conn in list(pending):
            drop(conn)
        sel.close()
    return got


def connect_parent(host: str, port: int, index: int, token: bytes, deadline: float) -> socket.socket:
    """Connect to the parent, retrying while it is not listening yet (nodes start unevenly)."""
    last: Optional[str] = None
    while time.monotonic() < deadline:
        try:
            sock = socket.create_connection((host, port), timeout=5)
        except OSError as err:
            last = err.strerror or str(err)
            time.sleep(0.2)
            continue
        sock.settimeout(None)
        sock.sendall(MAGIC + struct.pack("!I", index) + mac(token, b"child", str(index).encode()))
        return sock
    raise StageError(f"cannot reach {host}:{port} to receive the staged copy: {last or 'timed out'}")


def failure_word(sock: socket.socket) -> Optional[str]:
    try:
        sock.settimeout(1.0)
        if recv_exact(sock, 1) != ACK_FAIL:
            return None
        return recv_word(sock)
    except (OSError, EOFError, struct.error, StageError):
        return None


def send_failure(sock: socket.socket, message: str) -> None:
    """Tell the parent why this node (or one below it) failed; it may already be gone."""
    raw = message.encode("utf-8", "replace")[:4000]
    try:
        sock.sendall(ACK_FAIL + LEN.pack(len(raw)) + raw)
    except OSError:
        pass


def await_commit(up: socket.socket, parent_host: str, idle_s: float) -> None:
    """The parent's word that the whole tree holds its copy, or its reason to abort."""
    up.settimeout(idle_s)
    try:
        word = recv_exact(up, 1)
        if word == COMMIT:
            return
        if word + recv_exact(up, 3) == LEN.pack(ABORT):
            raise StageError(recv_word(up))
    except socket.timeout:
        raise StageError(f"{parent_host} did not confirm the whole tree within {idle_s:.0f} s") from None
    except (EOFError, OSError):
        pass
    raise StageError(f"{parent_host} failed before every node held its copy")


def ack_children(kids: Dict[int, socket.socket], hosts: List[str], idle_s: float) -> None:
    """Wait for each child's word on its whole subtree."""
    for idx, sock in kids.items():
        sock.settimeout(idle_s)
        try:
            word = recv_exact(sock, 1)
            if word == ACK_OK:
                continue
            raise StageError(recv_word(sock))
        except socket.timeout:
            raise StageError(f"{hosts[idx]} did not confirm its copy within {idle_s:.0f} s") from None
        except (EOFError, OSError):
            raise StageError(f"{hosts[idx]} failed while unpacking (no confirmation)") from None
