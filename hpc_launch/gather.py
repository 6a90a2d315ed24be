"""Hosts that announce themselves: the pods pattern of a master and workers with unknown addresses.

A worker pod (Kubernetes, Cloudera CML) gets its address when it starts, and its name has no DNS
entry. The job script on the first pod listens on a port (`python -m hpc_launch.gather listen`,
written by templates/body/hostfile.sh.j2 for `--gather PORT`); each worker runs
`hpc-launch announce FIRST_POD:PORT`, which sends one line, `hpc-launch-announce NAME ADDRESS`,
and waits for `ok`. The listener writes the DeepSpeed hostfile (this machine first, then the
workers in the order of --hosts, or of their arrival) once every expected worker has reported,
or fails after its timeout with one line naming the ones that did not.

What is announced is only a name and an address: the ranks then reach the address over ssh with
host keys verified, so a false announcement gets nowhere a wrong hostfile entry would not.
No imports beyond the standard library: this runs inside jobs.
"""

from __future__ import annotations

import argparse
import re
import socket
import sys
import time
from typing import Dict, List, Optional, Tuple

PREFIX = "hpc-launch-announce"
_WORD = re.compile(r"^[A-Za-z0-9_.%+:-]{1,253}$")  # a host name or an IPv4/IPv6 address, never a leading '-'


def _valid(word: str) -> bool:
    return bool(_WORD.match(word)) and not word.startswith("-")


def parse_line(line: str) -> Optional[Tuple[str, str]]:
    """(name, address) of one announcement line, or None if it is not one."""
    parts = line.strip().split()
    if len(parts) != 3 or parts[0] != PREFIX or not (_valid(parts[1]) and _valid(parts[2])):
        return None
    return parts[1], parts[2]


def listen(
    port: int, *, expect: List[str], count: int, timeout: float, bind: str = "0.0.0.0", log=sys.stderr
) -> Tuple[Dict[str, str], List[str]]:
    """Wait for `expect` (names), or for `count` workers of any name when none are named.
    Returns ({name: address} in arrival order, names still missing)."""
    got: Dict[str, str] = {}
    wanted = count if not expect else len(expect)

    def missing() -> List[str]:
        return [n for n in expect if n not in got] if expect else []

    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((bind, port))
    srv.listen(64)
    deadline = time.monotonic() + timeout
    try:
        while len(got) < wanted:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            srv.settimeout(left)
            try:
                conn, peer = srv.accept()
            except socket.timeout:
                break
            with conn:
                conn.settimeout(5)
                try:
                    data = conn.recv(512).decode("ascii", "replace")
                except OSError:
                    continue
                found = parse_line(data)
                if found is None:
                    log.write(
                        f"[hpc-launch] gather: ignored a connection from {peer[0]} that did not announce itself\n"
                    )
                    continue
                name, address = found
                if expect and name not in expect:
                    log.write(f"[hpc-launch] gather: ignored {name} ({address}): not one of {', '.join(expect)}\n")
                    _reply(conn, "unexpected")
                    continue
                got[name] = address
                log.write(f"[hpc-launch] gather: {name} is at {address} ({len(got)}/{wanted})\n")
                _reply(conn, "ok")
    finally:
        srv.close()
    if not expect and len(got) < wanted:
        return got, [f"{wanted - len(got)} more host(s)"]
    return got, missing()


def _reply(conn: socket.socket, word: str) -> None:
    try:
        conn.sendall(f"{word}\n".encode())
    except OSError:
        pass


class Refused(Exception):
    """The listener answered, and not `ok`: retrying would not change its mind."""


def announce(
    target: str,
    port: int,
    *,
    name: Optional[str] = None,
    address: Optional[str] = None,
    timeout: float = 120.0,
    retry_every: float = 1.0,
) -> Tuple[str, str]:
    """Tell the listener at target:port who we are; retried until it listens (workers often start
    first). The address is the one this machine uses to reach the listener unless given."""
    name = name or socket.gethostname()
    deadline = time.monotonic() + timeout
    last = "no answer"
    while True:
        try:
            with socket.create_connection((target, port), timeout=5.0) as s:
                mine = address or s.getsockname()[0]
                if not (_valid(name) and _valid(mine)):
                    raise Refused(f"{name!r} / {mine!r} is not a host name or address")
                s.sendall(f"{PREFIX} {name} {mine}\n".encode())
                s.settimeout(10)
                answer = s.recv(64).decode("ascii", "replace").strip()
            if answer == "ok":
                return name, mine
            raise Refused(f"{target}:{port} answered {answer or 'nothing'!r} (is {name} one of the job's --hosts?)")
        except OSError as exc:  # not listening yet, or gone: try again until the deadline
            last = exc.strerror or str(exc)
        if time.monotonic() + retry_every > deadline:
            raise TimeoutError(f"no listener at {target}:{port} within {timeout:.0f} s ({last})")
        time.sleep(retry_every)


def _main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hpc_launch.gather")
    sub = p.add_subparsers(dest="cmd", required=True)
    li = sub.add_parser("listen", help="inside the job, on the first host: wait for the others, write the hostfile")
    li.add_argument("--port", type=int, required=True)
    li.add_argument("--self", dest="self_addr", required=True, help="this machine's address (first hostfile line)")
    li.add_argument("--expect", default="", help="comma-separated names of the hosts that must report")
    li.add_argument("--count", type=int, default=0, help="with no --expect: how many hosts must report")
    li.add_argument("--slots", type=int, default=1)
    li.add_argument("--timeout", type=float, default=120.0)
    li.add_argument("-o", "--output", required=True)
    args = p.parse_args(argv)
    expect = [n for n in args.expect.split(",") if n]
    try:
        got, missing = listen(args.port, expect=expect, count=args.count, timeout=args.timeout)
    except OSError as exc:
        sys.stderr.write(
            f"[hpc-launch] error: cannot listen on port {args.port} for "
            f"--gather: {exc.strerror or exc}; pass another --gather PORT\n"
        )
        return 3
    if missing:
        reported = ", ".join(f"{n} ({a})" for n, a in got.items()) or "none"
        sys.stderr.write(
            f"[hpc-launch] error: {', '.join(missing)} did not announce within {args.timeout:.0f} s on port "
            f"{args.port} (reported: {reported}); run `hpc-launch announce {args.self_addr}:{args.port}` on each\n"
        )
        return 3
    order = expect or list(got)
    lines = [f"{args.self_addr} slots={args.slots}"] + [f"{got[n]} slots={args.slots}" for n in order]
    with open(args.output, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(_main())
