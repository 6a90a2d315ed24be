"""Node-local staging: one copy of a directory (the job's Python environment, a data set) or of a
container image (`--entry`: a file or directory, whole) on every node of a job, read from the
shared file system once, by a pipelined binary-tree broadcast.

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
The wire (frames, words, connections) is stage_wire, the stream stage_stream, the tree stage_nodes.
No imports beyond the standard library: this runs inside jobs, before the environment is usable.
"""

from __future__ import annotations

import argparse
import hmac
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from .paths import read_regular  # the package's own, standard library only
from .stage_nodes import (  # noqa: F401  (re-exported: the tests and the job script's callers name them here)
    StageError,
    children,
    depth,
    entry_name,
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
from .stage_stream import Fanout, Source, receive
from .stage_wire import (  # noqa: F401  (CHUNK, LEN, MAGIC re-exported for the tests)
    ACK_OK,
    CHUNK,
    COMMIT,
    LEN,
    MAGIC,
    TRAILER,
    accept_children,
    ack_children,
    await_commit,
    connect_parent,
    listen,
    mac,
    send_failure,
)


class Stopped(Exception):
    """The launcher stopped this node (srun --kill-on-bad-exit, mpirun and mpiexec end every task
    with SIGTERM once one fails; a cancelled job's step too): its partial copy is removed first."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(f"stopped by {signal.Signals(signum).name}")


STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


def _stop_on_signals() -> None:
    """Python's default for SIGTERM is to die on the spot, leaving DEST.partial-PID behind on a
    node that was mid-copy when another node failed. Raise instead, once: the cleanup below runs,
    and a second signal cannot cut it short (the launcher's SIGKILL after its grace still can)."""

    def stopped(signum: int, _frame: object) -> None:
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        raise Stopped(signum)

    for sig in STOP_SIGNALS:
        signal.signal(sig, stopped)


@dataclass
class _Place:
    """This node in the tree: who it is, its parent's connection, its children's."""

    hosts: List[str]
    index: int
    port: int
    token: bytes
    deadline: float
    idle_s: float
    up: Optional[socket.socket] = None
    srv: Optional[socket.socket] = None
    fanout: Fanout = field(default_factory=lambda: Fanout({}, []))

    @property
    def me(self) -> str:
        return self.hosts[self.index]

    @property
    def parent_host(self) -> Optional[str]:
        p = parent(self.index)
        return self.hosts[p] if p is not None else None

    def close(self) -> None:
        for sock in self.fanout.kids.values():
            sock.close()
        if self.srv is not None:
            self.srv.close()


def _connect(
    place: _Place, addrs: Optional[Dict[str, str]], announce_dir: Optional[str], net_if: Optional[str]
) -> None:
    """The parent first (a failure here, no listening port or no disk, then reaches it at once),
    then the children, each proven by the job's token."""
    index, hosts = place.index, place.hosts
    want = {c: hosts[c] for c in children(index, len(hosts))}
    own = interface_address(net_if) if net_if else None
    if announce_dir and own and want:  # children wait for it where this node's name does not resolve
        announce(announce_dir, index, own)
    p = parent(index)
    if p is not None:
        parent_addr = (addrs or {}).get(hosts[p])
        if parent_addr is None and announce_dir:
            parent_addr = announced(announce_dir, p, hosts[p], place.deadline)
        place.up = connect_parent(parent_addr or hosts[p], place.port, index, place.token, place.deadline)
    place.fanout = Fanout({}, hosts)
    if want:
        place.srv = listen(place.me, place.port, (addrs or {}).get(place.me) or own)
        place.fanout.kids = accept_children(place.srv, want, place.token, place.deadline)
        for sock in place.fanout.kids.values():
            sock.settimeout(place.idle_s)  # a child that stops reading fails its parent, not hangs it


def _trailer(place: _Place, source: Source, got: int, digest: bytes) -> bytes:
    """Node 0 signs what it sent; every other node checks what it got against that, and the signature."""
    if place.up is None:
        return TRAILER.pack(got, digest, mac(place.token, str(got).encode(), digest))
    trailer = source.trailer or b""
    size, sha, signed = TRAILER.unpack(trailer)
    if size != got or sha != digest:
        raise StageError(f"received {got} bytes that do not match the {size} bytes sent (sha256)")
    if not hmac.compare_digest(signed, mac(place.token, str(size).encode(), sha)):
        raise StageError("the stream's checksum is not signed with this job's token")
    return trailer


def _install(tmp: str, dest: str) -> None:
    """DEST.partial-PID becomes DEST; a copy left by an earlier job is replaced."""
    old = None
    # a stop signal waits until DEST is whole again (the old copy or the new), never between the renames
    held = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        if os.path.lexists(dest):
            old = f"{dest}.old-{os.getpid()}-{os.urandom(4).hex()}"
            os.rename(dest, old)
        os.rename(tmp, dest)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
    if old:
        shutil.rmtree(old, ignore_errors=True)


def _copy(place: _Place, src: str, dest: str, tmp: str, *, relocate_venv: bool, entry: bool) -> int:
    """Receive (node 0: read) the stream into `tmp`, forwarding it; verify it; install it once
    the whole tree holds its copy. Returns the bytes staged."""
    source = Source(place.up, place.parent_host or place.me, place.idle_s)
    if place.up is None:
        if not (os.path.exists(src) if entry else os.path.isdir(src)):
            raise StageError(f"{src} is not {'there' if entry else 'a directory'}")
        source.from_tar(src, entry=entry)
    got, digest = receive(source, place.fanout, tmp)
    place.fanout.end(_trailer(place, source, got, digest))
    if relocate_venv:  # the path the venv was made at, and the real one if that was through a link
        for old in dict.fromkeys((os.path.abspath(src), os.path.realpath(src))):
            relocate(tmp, old, dest)
    ack_children(place.fanout.kids, place.hosts, place.idle_s)
    # all or nothing: a copy replaces DEST only once node 0 knows every node holds one
    if place.up is not None:
        place.up.sendall(ACK_OK)
        await_commit(place.up, place.parent_host or place.me, place.idle_s)
    _install(tmp, dest)
    for sock in place.fanout.kids.values():
        sock.sendall(COMMIT)
    return got


def stage(
    hosts: List[str],
    index: int,
    src: str,
    dest: str,
    port: int,
    token: bytes,
    *,
    relocate_venv: bool = False,
    entry: bool = False,
    addrs: Optional[Dict[str, str]] = None,
    announce_dir: Optional[str] = None,
    net_if: Optional[str] = None,
    timeout: float = 300.0,
    idle_s: float = 120.0,
) -> Tuple[int, float]:
    """This node's part of the broadcast: SRC's contents in DEST (with `entry`, SRC itself as
    DEST/NAME: an image). Returns (bytes staged, seconds). Raises StageError naming the node that
    failed; its children are told to abort and its parent is told why."""
    t0 = time.monotonic()
    place = _Place(hosts, index, port, token, t0 + timeout, idle_s)
    dest = os.path.abspath(dest)
    tmp: Optional[str] = None
    try:
        try:
            _connect(place, addrs, announce_dir, net_if)
            own_destination(dest)  # made by the job itself, or checked: no other user's directory
            tmp = tempfile.mkdtemp(prefix=os.path.basename(dest) + ".partial-", dir=os.path.dirname(dest))
            got = _copy(place, src, dest, tmp, relocate_venv=relocate_venv, entry=entry)
        except StageError as err:
            raise StageError(str(err) if str(err).startswith("on ") else f"on {place.me}: {err}") from None
        except OSError as err:
            raise StageError(f"on {place.me}: {err}") from None
    except (StageError, Stopped) as err:
        # this node is failing: a stop signal now would only cut its cleanup short (its exit says why)
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        why = f"on {place.me}: {err}" if isinstance(err, Stopped) else str(err)
        place.fanout.abort(why)
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
        if place.up is not None:
            send_failure(place.up, why)
        raise
    finally:
        place.close()
    if place.up is not None:
        place.up.close()
    return got, time.monotonic() - t0


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m hpc_launch.stage", description=(__doc__ or "").splitlines()[0])
    ap.add_argument(
        "--resolve", metavar="DEST", help="print DEST (with --entry, DEST/NAME) as this node names it, and exit"
    )
    ap.add_argument("--hostfile", help="the job's DeepSpeed hostfile (node 0 first)")
    ap.add_argument("--src", help="the directory to copy (read on node 0 only)")
    ap.add_argument("--dest", help="node-local destination; $VAR expanded and {host} its name on each node")
    ap.add_argument("--entry", action="store_true", help="copy SRC itself (an image file or directory) as DEST/NAME")
    ap.add_argument("--port", type=int)
    ap.add_argument("--token-file", help="a file only the job's user can read: the job's secret")
    ap.add_argument("--index", type=int, help="this node's line in the hostfile")
    ap.add_argument("--index-var", help="the launcher's variable holding it (default: found by name/address)")
    ap.add_argument("--addrs", help="a file of `name address` lines, for node names that do not resolve")
    ap.add_argument("--net-if", help="the interface whose address this node listens on and announces")
    ap.add_argument("--announce", metavar="DIR", help="a shared directory where nodes announce their --net-if address")
    ap.add_argument("--venv", action="store_true", help="SRC is a virtualenv: relocate its bin/ to DEST")
    ap.add_argument("--fix", help="what the user can do about a failure, said on the error's line")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds for the tree to connect")
    ap.add_argument("--idle", type=float, default=120.0, help="seconds without data before failing")
    return ap


def main(argv: Optional[List[str]] = None) -> int:
    ap = _parser()
    a = ap.parse_args(argv)
    if a.resolve:  # node 0's copy, for the batch script (which runs on node 0)
        where = resolve(a.resolve, read_hosts(a.hostfile)[0] if a.hostfile else socket.gethostname())
        print(os.path.join(where, entry_name(a.src)) if a.entry and a.src else where)
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
        _stop_on_signals()
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
            entry=a.entry,
            timeout=a.timeout,
            idle_s=a.idle,
            addrs=read_addrs(a.addrs) if a.addrs else None,
            announce_dir=a.announce,
            net_if=a.net_if,
        )
    except Stopped as err:  # not this node's failure: the launcher's word that the step is over
        print(
            f"[hpc-launch] stage: {host} {err} (the launcher ended the step); no partial copy left",
            file=sys.stderr,
            flush=True,
        )
        return 128 + err.signum
    except (StageError, OSError) as err:
        where = "" if str(err).startswith("on ") else f"on {host}: "
        fix = f" ({a.fix})" if a.fix else ""
        print(f"[hpc-launch] stage: error {where}{err}{fix}", file=sys.stderr, flush=True)
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
