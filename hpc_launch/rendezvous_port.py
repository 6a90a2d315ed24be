"""The job's rendezvous port: the first one free on this node from the profile's port_base.

The job script runs it on the node that serves the rendezvous (rank 0's: the hostfile's first
line, localhost, or the pods' interface address), as `python -m hpc_launch.rendezvous_port BASE
FIRST JOB` (templates/body/rendezvous.sh.j2); where hpc-launch is not importable the script keeps
the hashed first port. Ports are tried from FIRST (port_base + job number % 1000) upward, within
BASE..BASE+999. Rank 0 binds its port only seconds later, after importing torch, so jobs that start
together would all see the same port free: a port handed out is noted for 10 minutes in
${HPC_LAUNCH_PORT_DIR:-/tmp/hpc-launch-ports-UID} (a directory the user owns, under a lock), and
the next job skips it. Another program can still take the port in that window; the start-up check
names it. No imports beyond the standard library: this runs inside jobs.
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import stat
import sys
import time
from typing import IO, Optional

SPAN = 1000  # ports BASE..BASE+999
NOTE_S = 600  # how long a handed-out port is kept for the job it was given to


def is_free(port: int) -> bool:
    """Bindable on every address family this node has (IPv6 skipped where there is none)."""
    for family, host in ((socket.AF_INET, ""), (socket.AF_INET6, "::")):
        try:
            with socket.socket(family, socket.SOCK_STREAM) as s:
                s.bind((host, port))
        except OSError as err:
            if err.errno != errno.EAFNOSUPPORT:
                return False
    return True


def _notes_dir() -> Optional[str]:
    notes = os.environ.get("HPC_LAUNCH_PORT_DIR") or f"/tmp/hpc-launch-ports-{os.getuid()}"
    try:
        os.makedirs(notes, 0o700, exist_ok=True)
        st = os.lstat(notes)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        return None  # not ours (another user's, or a link): the kernel alone says which ports are free
    return notes


def _lock(notes: str) -> Optional[IO[str]]:
    try:
        lock = open(os.path.join(notes, "lock"), "a")
        fcntl.flock(lock, fcntl.LOCK_EX)  # held until this process exits: one job at a time looks and notes
        return lock
    except OSError:
        return None


def choose(base: int, first: int, job: str) -> Optional[int]:
    notes = _notes_dir()
    lock = _lock(notes) if notes else None
    if lock is None:
        notes = None
    for i in range(SPAN):
        port = base + (first - base + i) % SPAN
        note = os.path.join(notes, str(port)) if notes else None
        if note and os.path.exists(note) and time.time() - os.stat(note).st_mtime < NOTE_S:
            continue  # handed to a job that may not have bound it yet
        if is_free(port):
            if note:
                with open(note, "w") as fh:
                    fh.write(job)
            return port
    return None


def main(argv: list[str]) -> int:
    base, first, job = int(argv[0]), int(argv[1]), argv[2]
    port = choose(base, first, job)
    if port is None:
        print(f"[hpc-launch] warning: no free port in {base}..{base + SPAN - 1} on this node", file=sys.stderr)
        return 1
    print(port)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
