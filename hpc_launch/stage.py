"""Node-local staging: one copy of a directory (the job's Python environment, a data set) on every
node of a job, read from the shared file system once, by a pipelined binary-tree broadcast.

Importing torch and DeepSpeed from a shared parallel file system on thousands of nodes at once is a
metadata storm (some 24,000 file system calls per import, on every node at the same moment). Here
node 0 reads a tar stream of SRC once (the system `tar`); node i (i > 0) receives it from node
(i-1)//2 and forwards each chunk to its children 2i+1 and 2i+2 before unpacking it, so the time is
about size/bandwidth + depth x chunk, not N x metadata (docs/staging.md). Every node checks the
stream's size and sha256 (signed with the job's token, which a node also proves before it is fed)
and unpacks into DEST.partial-PID; a venv is relocated (bin/ scripts name their own path). Each
node acknowledges its parent once its whole subtree has; node 0 then sends commit down the tree,
and only then does every node rename its copy to DEST: all nodes or none, and any failure names
the node it happened on.

The job script runs it once per node through the job's own launcher (templates/body/stage.sh.j2):
`python -m hpc_launch.stage --hostfile F --src DIR --dest DIR --port P --token-file F`.
No imports beyond the standard library: this runs inside jobs, before the environment is usable.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import os
import shutil
import socket
import struct
import sys
import subprocess
import tempfile
import time
from typing import IO, Dict, List, Optional, Tuple

from .paths import read_regular  # the package's own, standard library only
from .stage_nodes import (  # noqa: F401  (re-exported: the tests and the job script's callers name them here)
    StageError,
    children,
    depth,
    my_index,
    parent,
    announce,
    announced,
    interface_address,
    own_destination,
    read_addrs,
    read_hosts,
    relocate,
    resolve,
)

MAGIC = b"HPCSTG1\n"
CHUNK = 1 << 20  # bytes per frame: large enough that per-frame costs vanish, small enough to pipeline
_LEN = struct.Struct("!I")
_END = 0  # frame length 0: the stream ends, the trailer follows
_ABORT = 0xFFFFFFFF  # the sender failed: a message follows, the receiver fails naming it
_TRAILER = struct.Struct("!Q32s32s")  # total size, sha256 of the stream, HMAC(token, size || sha256)
_ACK_OK = b"K"
_ACK_FAIL = b"F"
_COMMIT = b"C"


def _mac(token: bytes, *parts: bytes) -> bytes:
    return hmac.new(token, b"\0".join(parts), hashlib.sha256).digest()


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        got = sock.recv(n - len(buf))
        if not got:
            raise EOFError
        buf += got
    return bytes(buf)


MAX_WORD = 4096  # a failure's message: senders cut theirs at 4000 bytes


def _recv_word(sock: socket.socket) -> str:
    """A length-prefixed failure message, its length checked before it is read."""
    (m,) = _LEN.unpack(_recv_exact(sock, 4))
    if m > MAX_WORD:
        raise StageError(f"a peer announced a {m}-byte message: not one of staging's")
    return _recv_exact(sock, m).decode("utf-8", "replace")


# --- the tree's connections ---------------------------------------------------------------------


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
                if not ok or not hmac.compare_digest(hello[-32:], _mac(token, b"child", str(idx).encode())):
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
        sock.sendall(MAGIC + struct.pack("!I", index) + _mac(token, b"child", str(index).encode()))
        return sock
    raise StageError(f"cannot reach {host}:{port} to receive the staged copy: {last or 'timed out'}")


def _failure_word(sock: socket.socket) -> Optional[str]:
    try:
        sock.settimeout(1.0)
        if _recv_exact(sock, 1) != _ACK_FAIL:
            return None
        return _recv_word(sock)
    except (OSError, EOFError, struct.error, StageError):
        return None


# --- the stream -----------------------------------------------------------------------------------


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
                why = _failure_word(sock)  # a child that failed said why before it closed
                raise StageError(
                    why or f"{self.hosts[idx]} dropped the staging stream: {err.strerror or err}"
                ) from None

    def chunk(self, data: bytes) -> None:
        if data:
            self._each(_LEN.pack(len(data)) + data)

    def end(self, trailer: bytes) -> None:
        self._each(_LEN.pack(_END) + trailer)

    def abort(self, message: str) -> None:
        raw = message.encode("utf-8", "replace")[:4000]
        for sock in self.kids.values():
            try:
                sock.sendall(_LEN.pack(_ABORT) + _LEN.pack(len(raw)) + raw)
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

    def from_tar(self, src: str) -> None:
        """The system tar writes the stream (several times faster than tarfile on a venv's ~40k files)."""
        self._err = tempfile.TemporaryFile()
        self._tar = subprocess.Popen(["tar", "-C", src, "-cf", "-", "."], stdout=subprocess.PIPE, stderr=self._err)

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
            (n,) = _LEN.unpack(_recv_exact(self.sock, 4))
            if n == _END:
                self.trailer = _recv_exact(self.sock, _TRAILER.size)
                return None
            if n == _ABORT:
                raise StageError(_recv_word(self.sock))
            if n > CHUNK:  # checked before a byte of it is read: a node never holds what a stranger announces
                raise StageError(f"{self.parent_host} announced a frame of {n} bytes: staging sends at most {CHUNK}")
            return _recv_exact(self.sock, n)
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


def _install(tmp: str, dest: str) -> None:
    """DEST.partial-PID becomes DEST; a copy left by an earlier job is replaced."""
    old = None
    if os.path.lexists(dest):
        old = f"{dest}.old-{os.getpid()}-{os.urandom(4).hex()}"
        os.rename(dest, old)
    os.rename(tmp, dest)
    if old:
        shutil.rmtree(old, ignore_errors=True)


def _await_commit(up: socket.socket, parent_host: str, idle_s: float) -> None:
    """The parent's word that the whole tree holds its copy, or its reason to abort."""
    up.settimeout(idle_s)
    try:
        word = _recv_exact(up, 1)
        if word == _COMMIT:
            return
        if word + _recv_exact(up, 3) == _LEN.pack(_ABORT):
            raise StageError(_recv_word(up))
    except socket.timeout:
        raise StageError(f"{parent_host} did not confirm the whole tree within {idle_s:.0f} s") from None
    except (EOFError, OSError):
        pass
    raise StageError(f"{parent_host} failed before every node held its copy")


def _ack_children(kids: Dict[int, socket.socket], hosts: List[str], idle_s: float) -> None:
    """Wait for each child's word on its whole subtree."""
    for idx, sock in kids.items():
        sock.settimeout(idle_s)
        try:
            word = _recv_exact(sock, 1)
            if word == _ACK_OK:
                continue
            raise StageError(_recv_word(sock))
        except socket.timeout:
            raise StageError(f"{hosts[idx]} did not confirm its copy within {idle_s:.0f} s") from None
        except (EOFError, OSError):
            raise StageError(f"{hosts[idx]} failed while unpacking (no confirmation)") from None


def stage(
    hosts: List[str],
    index: int,
    src: str,
    dest: str,
    port: int,
    token: bytes,
    *,
    relocate_venv: bool = False,
    addrs: Optional[Dict[str, str]] = None,
    announce_dir: Optional[str] = None,
    net_if: Optional[str] = None,
    timeout: float = 300.0,
    idle_s: float = 120.0,
) -> Tuple[int, float]:
    """This node's part of the broadcast. Returns (bytes staged, seconds). Raises StageError
    naming the node that failed; its children are told to abort and its parent is told why."""
    t0 = time.monotonic()
    me = hosts[index]
    n = len(hosts)
    deadline = t0 + timeout
    want = {c: hosts[c] for c in children(index, n)}
    p = parent(index)
    up: Optional[socket.socket] = None
    srv: Optional[socket.socket] = None
    fanout = Fanout({}, hosts)
    dest = os.path.abspath(dest)
    tmp: Optional[str] = None
    try:
        try:
            own = interface_address(net_if) if net_if else None
            if announce_dir and own and want:  # children wait for it where this node's name does not resolve
                announce(announce_dir, index, own)
            # the parent first: a failure here (no listening port, no disk) then reaches it at once
            if p is not None:
                parent_addr = (addrs or {}).get(hosts[p])
                if parent_addr is None and announce_dir:
                    parent_addr = announced(announce_dir, p, hosts[p], deadline)
                up = connect_parent(parent_addr or hosts[p], port, index, token, deadline)
            if want:
                srv = listen(me, port, (addrs or {}).get(me) or own)
                fanout.kids = accept_children(srv, want, token, deadline)
                for sock in fanout.kids.values():
                    sock.settimeout(idle_s)  # a child that stops reading fails its parent, not hangs it
            source = Source(up, hosts[p] if p is not None else me, idle_s)
            if p is None:
                if not os.path.isdir(src):
                    raise StageError(f"{src} is not a directory")
                source.from_tar(src)
            own_destination(dest)  # made by the job itself, or checked: no other user's directory
            tmp = tempfile.mkdtemp(prefix=os.path.basename(dest) + ".partial-", dir=os.path.dirname(dest))
            got, digest = receive(source, fanout, tmp)
            if p is None:
                trailer = _TRAILER.pack(got, digest, _mac(token, str(got).encode(), digest))
            else:
                trailer = source.trailer or b""
                size, sha, mac = _TRAILER.unpack(trailer)
                if size != got or sha != digest:
                    raise StageError(f"received {got} bytes that do not match the {size} bytes sent (sha256)")
                if not hmac.compare_digest(mac, _mac(token, str(size).encode(), sha)):
                    raise StageError("the stream's checksum is not signed with this job's token")
            fanout.end(trailer)
            if relocate_venv:  # the path the venv was made at, and the real one if that was through a link
                for old in dict.fromkeys((os.path.abspath(src), os.path.realpath(src))):
                    relocate(tmp, old, dest)
            _ack_children(fanout.kids, hosts, idle_s)
            # all or nothing: a copy replaces DEST only once node 0 knows every node holds one
            if up is not None:
                up.sendall(_ACK_OK)
                _await_commit(up, hosts[p] if p is not None else me, idle_s)
            _install(tmp, dest)
            for sock in fanout.kids.values():
                sock.sendall(_COMMIT)
        except StageError as err:
            raise StageError(str(err) if str(err).startswith("on ") else f"on {me}: {err}") from None
        except OSError as err:
            raise StageError(f"on {me}: {err}") from None
    except StageError as err:
        fanout.abort(str(err))
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
        if up is not None:
            raw = str(err).encode("utf-8", "replace")[:4000]
            try:
                up.sendall(_ACK_FAIL + _LEN.pack(len(raw)) + raw)
            except OSError:
                pass
        raise
    finally:
        for sock in fanout.kids.values():
            sock.close()
        if srv is not None:
            srv.close()
    if up is not None:
        up.close()
    return got, time.monotonic() - t0


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m hpc_launch.stage", description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--resolve", metavar="DEST", help="print DEST as this node names it, and exit")
    ap.add_argument("--hostfile", help="the job's DeepSpeed hostfile (node 0 first)")
    ap.add_argument("--src", help="the directory to copy (read on node 0 only)")
    ap.add_argument("--dest", help="node-local destination; $VAR expanded and {host} its name on each node")
    ap.add_argument("--port", type=int)
    ap.add_argument("--token-file", help="a file only the job's user can read: the job's secret")
    ap.add_argument("--index", type=int, help="this node's line in the hostfile")
    ap.add_argument("--index-var", help="the launcher's variable holding it (default: found by name/address)")
    ap.add_argument("--addrs", help="a file of `name address` lines, for node names that do not resolve")
    ap.add_argument("--net-if", help="the interface whose address this node listens on and announces")
    ap.add_argument("--announce", metavar="DIR", help="a shared directory where nodes announce their --net-if address")
    ap.add_argument("--venv", action="store_true", help="SRC is a virtualenv: relocate its bin/ to DEST")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds for the tree to connect")
    ap.add_argument("--idle", type=float, default=120.0, help="seconds without data before failing")
    a = ap.parse_args(argv)
    if a.resolve:  # node 0's copy, for the batch script (which runs on node 0)
        print(resolve(a.resolve, read_hosts(a.hostfile)[0] if a.hostfile else socket.gethostname()))
        return 0
    missing = [
        f"--{k.replace('_', '-')}" for k in ("hostfile", "src", "dest", "port", "token_file") if not getattr(a, k)
    ]
    if missing:
        ap.error(f"{', '.join(missing)} required")
    host = socket.gethostname().split(".")[0]
    try:
        hosts = read_hosts(a.hostfile)
        index = a.index if a.index is not None else my_index(hosts, a.index_var)
        if not 0 <= index < len(hosts):
            raise StageError(f"node index {index} is not in the hostfile's {len(hosts)} hosts")
        host = hosts[index]
        token = read_regular(a.token_file, limit=4096).strip()  # a FIFO there is refused, never waited on
        if len(token) < 16:
            raise StageError(f"{a.token_file} holds no token")
        dest = resolve(a.dest, host)
        size, took = stage(
            hosts,
            index,
            a.src,
            dest,
            a.port,
            token,
            relocate_venv=a.venv,
            timeout=a.timeout,
            idle_s=a.idle,
            addrs=read_addrs(a.addrs) if a.addrs else None,
            announce_dir=a.announce,
            net_if=a.net_if,
        )
    except (StageError, OSError) as err:
        where = "" if str(err).startswith("on ") else f"on {host}: "
        print(f"[hpc-launch] stage: error {where}{err}", file=sys.stderr, flush=True)
        return 3
    if index == 0:
        print(
            f"[hpc-launch] stage: {a.src} -> {dest} on {len(hosts)} node(s), "
            f"{size / 1e6:.1f} MB in {took:.1f} s (tree depth {depth(len(hosts))}, every copy verified)",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
