"""Where each node of a staging job stands (hpc_launch/stage.py): the binary tree over the hostfile
(who feeds whom), this node's place in it, how it finds its parent's address, its copy's path, and a
copied venv made to name that path.
Standard library only: it runs inside jobs, before the environment is usable."""

from __future__ import annotations

import os
import socket
import stat
import struct
import time
from typing import Dict, List, Optional

RELOCATE_MAX = 1 << 20  # bin/ files larger than this are binaries, never rewritten


class StageError(Exception):
    """A failure of this node or of one below it: the message names the node."""


def children(i: int, n: int) -> List[int]:
    return [c for c in (2 * i + 1, 2 * i + 2) if c < n]


def parent(i: int) -> Optional[int]:
    return (i - 1) // 2 if i > 0 else None


def depth(n: int) -> int:
    """Hops from node 0 to the deepest node of an n-node tree."""
    return max(0, (n).bit_length() - 1)


def read_hosts(path: str) -> List[str]:
    """The hosts of a DeepSpeed hostfile (`host slots=N`), in order, each once."""
    hosts: List[str] = []
    with open(path) as fh:
        for line in fh:
            word = line.split("#", 1)[0].split()
            if word and word[0] not in hosts:
                hosts.append(word[0])
    if not hosts:
        raise StageError(f"hostfile {path} names no host")
    return hosts


def _is_local(addr: str) -> bool:
    """The kernel routes to its own addresses from themselves (a bind test is fooled by ip_nonlocal_bind)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((addr, 9))
            return bool(s.getsockname()[0] == addr)
    except OSError:
        return False


# The same rank under the names each PMI gives it. HPE PALS mpiexec sets PALS_RANKID whatever the
# PMI, PMI_RANK under PMI (ALCF's Polaris scripts) and PMIX_RANK under PMIx: ALCF's Aurora pages
# read PMIX_RANK or PALS_RANKID under a plain mpiexec, none reads PMI_RANK.
_RANK_NAMES = {"PMI_RANK": ("PALS_RANKID", "PMIX_RANK", "PMI_RANK")}


def my_index(hosts: List[str], var: Optional[str] = None) -> int:
    """This node's place in the hostfile: the launcher's node id where it gives one (`var`: srun's
    SLURM_NODEID, mpirun's OMPI_COMM_WORLD_RANK, mpiexec's PMI_RANK or its other names, with one
    task per node; hostfile order is node-list order), else the entry that is this host by name
    or by an address this node owns (pdsh)."""
    if var:
        names = _RANK_NAMES.get(var, (var,))
        value = next((os.environ[n] for n in names if os.environ.get(n, "").isdigit()), None)
        if value is None:
            raise StageError(f"the launcher set none of {', '.join(names)} (this node's place)")
        return int(value)
    me = socket.gethostname()
    for i, h in enumerate(hosts):
        if h in (me, me.split(".")[0]):
            return i
    for i, h in enumerate(hosts):
        try:
            if _is_local(socket.gethostbyname(h)):
                return i
        except OSError:
            continue
    raise StageError(f"{me} is not in the hostfile ({', '.join(hosts[:4])}{', ...' if len(hosts) > 4 else ''})")


def resolve(dest: str, host: str) -> str:
    """DEST as this node names it: $VAR from its environment, {host} its hostfile entry."""
    return os.path.abspath(os.path.expandvars(dest).replace("{host}", host))


def entry_name(src: str) -> str:
    """The name SRC has in DEST when it is staged whole (an image file or directory): its real one."""
    return os.path.basename(os.path.realpath(src))


def own_destination(dest: str) -> None:
    """Make sure no other user can have prepared DEST or change it once staged (a shared /tmp-style
    path another user created first would run their code in the job): every directory above it,
    as named and as its links resolve, belongs to this user or root and is not writable by others
    unless sticky; the missing ones are made here, 0700; DEST itself, if an earlier copy is there,
    is this user's. StageError naming the path otherwise."""
    parent = os.path.dirname(dest) or "/"
    existing = parent
    while not os.path.lexists(existing):
        existing = os.path.dirname(existing)
    _trusted_chain(existing)
    _trusted_chain(os.path.realpath(existing))  # where its links lead
    if existing != parent:
        made = existing
        for part in os.path.relpath(parent, existing).split(os.sep):
            made = os.path.join(made, part)
            try:
                os.mkdir(made, 0o700)
            except FileExistsError:
                pass  # made in the meantime: trusted only if it is ours, below
            _trusted(made, os.lstat(made), own=True)
    if os.path.lexists(dest):
        _trusted(dest, os.lstat(dest), own=True)


def _trusted_chain(path: str) -> None:
    here = "/"
    for part in [p for p in path.split("/") if p]:
        here = os.path.join(here, part)
        _trusted(here, os.lstat(here))


def _trusted(path: str, st: os.stat_result, own: bool = False) -> None:
    uid = os.geteuid()
    if st.st_uid != uid and (own or st.st_uid != 0):
        raise StageError(
            f"{path} belongs to uid {st.st_uid}, not this job's user: another user could put code of theirs "
            "into the staged copy (give a destination under a directory of your own)"
        )
    if stat.S_ISDIR(st.st_mode) and st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        raise StageError(
            f"{path} is writable by other users and not sticky: they could replace the staged copy "
            "(give a destination under a directory of your own, or under a sticky one such as /tmp)"
        )


def read_addrs(path: str) -> Dict[str, str]:
    """`name address` lines: where node names do not resolve (the testbed's pods; the job script
    writes them from the scheduler's NodeAddr, one query for all nodes)."""
    with open(path) as fh:
        return {w[0]: w[1] for w in (line.split() for line in fh) if len(w) >= 2}


def interface_address(net_if: str) -> str:
    """The IPv4 address of `net_if` on this node (SIOCGIFADDR), as the job's rendezvous reads it."""
    import fcntl

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", net_if.encode()[:15]))
        except OSError as err:
            why = f"network interface {net_if} (profile key net_if) has no IPv4 address here"
            raise StageError(f"{why}: {err.strerror or err}") from None
    return socket.inet_ntoa(packed[20:24])


def announce(directory: str, index: int, address: str) -> None:
    """This node's address where the others find it: a file in the job's shared work dir, for node
    names that do not resolve between nodes (the testbed's PBS; the job's token is there already)."""
    path = os.path.join(directory, str(index))
    with open(f"{path}.tmp", "w") as fh:
        fh.write(address + "\n")
    os.replace(f"{path}.tmp", path)


def announced(directory: str, index: int, name: str, deadline: float) -> str:
    """The parent's address: its name where it resolves, else what it announced (waited for)."""
    try:
        return socket.gethostbyname(name)
    except OSError:
        pass
    path = os.path.join(directory, str(index))
    while True:
        try:
            with open(path) as fh:
                address = fh.read().strip()
            if address:
                return address
        except FileNotFoundError:
            pass
        if time.monotonic() >= deadline:
            raise StageError(f"{name} neither resolves nor announced its address (not started?)")
        time.sleep(0.2)


def relocate(root: str, old: str, new: str) -> int:
    """A venv names its own absolute path in bin/ (activate's VIRTUAL_ENV, the shebang of every
    console script): point them at the copy. Returns the number of files rewritten."""
    bindir = os.path.join(root, "bin")
    old_b, new_b = old.encode(), new.encode()
    n = 0
    for name in sorted(os.listdir(bindir)) if os.path.isdir(bindir) else []:
        path = os.path.join(bindir, name)
        if os.path.islink(path) or not os.path.isfile(path) or os.path.getsize(path) > RELOCATE_MAX:
            continue
        with open(path, "rb") as fh:
            data = fh.read()
        if b"\0" in data or old_b not in data:
            continue
        mode = os.stat(path).st_mode
        with open(path, "wb") as fh:
            fh.write(data.replace(old_b, new_b))
        os.chmod(path, mode)
        n += 1
    return n
