"""The pre-flight gate: before the first training step, the job proves it became what was asked.

Every rank publishes what it is (rank, host, local rank, threads, CPU binding, device, network
interface) in the rendezvous store, with a deadline, before any process group exists: a rank
claimed twice or a rank that never came is named in seconds instead of hanging the process
group's init for its 30-minute timeout. Rank 0 checks the whole world against the job's plan
($HPC_LAUNCH_RANKS_PER_NODE; the checks are preflight_world.py's) and writes one verdict every
rank reads. Then the process group starts on the same store and one small all-reduce proves the
backend moves data and measures it.

On failure every rank stops with protocol.EXIT_PREFLIGHT, the log says which host and which fact
and the fix (`[hpc-launch] preflight failed: ...`, read by `doctor`), and a host whose interface
is missing is reported bad (protocol.report_bad_host) so the next link or retry avoids it.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import socket
import struct
import time
from datetime import timedelta
from typing import Callable, Dict, List, Mapping, Optional

from hpc_launch import protocol
from hpc_launch.one_line import say

from .errors import PreflightError
from .preflight_world import Problem, check
from .rank_info import RankInfo

_KEY = "hpc-launch/preflight"
_SIOCGIFFLAGS, _SIOCGIFADDR, _IFF_UP = 0x8913, 0x8915, 0x1
PROBE_BYTES = 4 << 20  # the all-reduce probe: big enough to measure, small enough for a second


# ---- what one rank is --------------------------------------------------------------------------


def interface_problem(spec: Optional[str]) -> Optional[str]:
    """None if the interface named like NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME (a comma list of
    prefixes, `=` for exact names, `^` to exclude) is up with an IPv4 address on this host. The
    job script's spares check holds nodes to the same rule (protocol.interface_ok_shell)."""
    if not spec or spec.startswith("^"):
        return None  # nothing named, or only exclusions: the library picks
    exact = spec.startswith("=")
    wanted = [w for w in spec.lstrip("=").split(",") if w]
    have = [name for _, name in socket.if_nameindex()]
    found = [n for n in have if any(n == w if exact else n.startswith(w) for w in wanted)]
    if not found:
        return f"interface {spec} does not exist (this host has: {', '.join(have)})"
    states = {n: _if_state(n) for n in found}
    if any(state == "ok" for state in states.values()):
        return None
    return "; ".join(f"interface {n} {state}" for n, state in states.items()) + f" (this host has: {', '.join(have)})"


def _if_state(name: str) -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        packed = struct.pack("256s", name.encode()[:15])
        flags = struct.unpack("H", fcntl.ioctl(s.fileno(), _SIOCGIFFLAGS, packed)[16:18])[0]
        if not flags & _IFF_UP:
            return "is down"
        try:
            fcntl.ioctl(s.fileno(), _SIOCGIFADDR, packed)
        except OSError:
            return "has no IPv4 address"
    return "ok"


def _device(local_rank: int) -> Optional[str]:
    """The accelerator this rank drives, as (visible-device list, index): None on CPU."""
    from deepspeed.accelerator import get_accelerator

    acc = get_accelerator()
    if acc.device_name() == "cpu":
        return None
    visible = next(
        (
            os.environ[k]
            for k in ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ZE_AFFINITY_MASK")
            if os.environ.get(k)
        ),
        "",
    )
    index = acc.current_device()
    ids = visible.split(",") if visible else []
    # the physical id when the launcher narrowed the visible devices, else the index itself
    return ids[index] if index < len(ids) else str(index)


def local_facts(info: RankInfo, *, ifname: Optional[str], device: Optional[str]) -> Dict:
    import torch

    return {
        "rank": info.rank,
        "host": socket.gethostname(),
        "local_rank": info.local_rank,
        "local_size": info.local_size,
        "threads": torch.get_num_threads(),
        "cpus": sorted(os.sched_getaffinity(0)),
        "device": device,
        "ifname": ifname,
        "if_problem": interface_problem(ifname),
        "source": info.source,
    }


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


# ---- the gate itself -----------------------------------------------------------------------------


_MOST_TIMEOUT_S = 86400.0  # a day: more is no start-up, and timedelta/TCPStore take it


def _timeout(env: Mapping[str, str]) -> float:
    """$HPC_LAUNCH_PREFLIGHT_TIMEOUT in seconds (unset or blank: the default). A value that is no
    time to wait (nan, inf, 0, -1, a word) is the gate's own refusal, never a traceback."""
    raw = (env.get(protocol.ENV_PREFLIGHT_TIMEOUT) or "").strip()
    if not raw:
        return protocol.PREFLIGHT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not 0 < value <= _MOST_TIMEOUT_S:  # also false for nan
        raise PreflightError(
            f"${protocol.ENV_PREFLIGHT_TIMEOUT}={raw!r} is not a number of seconds from 0 to {_MOST_TIMEOUT_S:.0f}",
            hint=f"set it to the seconds every rank may take to start (default {protocol.PREFLIGHT_TIMEOUT_S:.0f}), "
            "or unset it; nothing trained",
        )
    return value


def _say(line: str) -> None:
    say(line)


def gate(
    info: RankInfo,
    *,
    backend: str,
    env: Mapping[str, str] = os.environ,
    device_of: Callable[[int], Optional[str]] = _device,
):
    """Run the checks; return the rendezvous store for the process group (None for one rank).

    `device_of(local_rank)`: the accelerator the rank drives (DeepSpeed's view for the entrypoint;
    the job layer passes a torch-only one, as a user's script need not import DeepSpeed)."""

    t0 = time.monotonic()
    ifname = env.get("NCCL_SOCKET_IFNAME" if backend == "nccl" else "GLOO_SOCKET_IFNAME") or None
    facts = local_facts(info, ifname=ifname, device=device_of(info.local_rank))
    limit = _timeout(env)
    if info.world_size == 1:  # no peers: only this rank's own facts
        problems = check([facts], world=1, ranks_per_node=None)
        if problems:
            raise PreflightError(
                _fail(problems), hint=f"nothing trained; the job ends with exit {protocol.EXIT_PREFLIGHT}"
            )
        return None, time.monotonic() - t0
    # torchrun's agent already serves the store on MASTER_PORT (and may restart the workers)
    agent = env.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    prefix = f"{_KEY}/{env.get('TORCHELASTIC_RESTART_COUNT', '0')}"
    # only a rank 0 on MASTER_ADDR's host serves: a second "rank 0" elsewhere joins and is caught
    serve = info.rank == 0 and not agent and _is_here(env["MASTER_ADDR"])
    store = _store(env, info, serve=serve, limit=limit)
    claims = store.add(f"{prefix}/claim/{info.rank}", 1)
    if claims > 1:
        store.set(f"{prefix}/twice/{info.rank}", facts["host"])
    else:
        store.set(f"{prefix}/facts/{info.rank}", json.dumps(facts))
    if info.rank == 0 and claims == 1:
        verdict = _judge(store, prefix, info, env, limit, t0)
        store.set(f"{prefix}/verdict", verdict)
    try:
        store.wait([f"{prefix}/verdict"], timedelta(seconds=limit + 30))
        verdict = store.get(f"{prefix}/verdict").decode()
    except Exception:  # noqa: BLE001 - rank 0 never judged: it is the one missing
        raise PreflightError(
            f"rank {info.rank} on {facts['host']}: rank 0 gave no verdict within {limit + 30:.0f} s "
            f"(rank 0 did not start, or started twice elsewhere)",
            hint="look for rank 0's host in the launcher's output",
            every_rank=True,
        ) from None
    if claims > 1:
        raise PreflightError(
            f"rank {info.rank} was started twice (again on {facts['host']})",
            hint="the launcher's rank variable is wrong for this launcher (see hpc_launch/train/dist.py CONVENTIONS)",
            every_rank=True,
        )
    if verdict:
        raise PreflightError(verdict, hint=f"nothing trained; the job ends with exit {protocol.EXIT_PREFLIGHT}")
    return store, time.monotonic() - t0


def _is_here(addr: str) -> bool:
    """Whether MASTER_ADDR is an address of this host (binding to it works only here)."""
    try:
        infos = socket.getaddrinfo(addr, None, socket.AF_INET, socket.SOCK_STREAM)
    except OSError:
        return True  # unresolvable here: let the store say so
    for *_, sockaddr in infos:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((sockaddr[0], 0))
                return True
            except OSError:
                continue
    return False


def _store(env: Mapping[str, str], info: RankInfo, *, serve: bool, limit: float):
    import torch.distributed as tdist

    addr, port = env["MASTER_ADDR"], int(env["MASTER_PORT"])
    try:
        # multi_tenant: a process group started later in this process on MASTER_PORT (a user's
        # env:// init after the job layer's gate) shares this server instead of failing to bind
        return tdist.TCPStore(
            addr,
            port,
            info.world_size,
            is_master=serve,
            timeout=timedelta(seconds=limit),
            wait_for_workers=False,
            multi_tenant=serve,
        )
    except tdist.DistNetworkError as err:
        if not serve or "EADDRINUSE" not in str(err):
            raise
    # The port is taken here: another rank 0 (started twice) serves it, which joining as a client
    # reveals; anything else there fails the handshake and is named.
    try:
        return tdist.TCPStore(
            addr,
            port,
            info.world_size,
            is_master=False,
            timeout=timedelta(seconds=min(limit, 30)),
            wait_for_workers=False,
        )
    except Exception:  # noqa: BLE001 - not a store: some other program holds the port
        raise PreflightError(
            f"MASTER_PORT {port} on {socket.gethostname()} is held by another program",
            hint=(
                "the job script took the first port free on this node from the profile's rendezvous.port_base; "
                "another program bound it before rank 0 did: submit again, or pass --env MASTER_PORT=PORT"
            ),
        ) from None


def _judge(store, prefix: str, info: RankInfo, env: Mapping[str, str], limit: float, t0: float) -> str:
    """Rank 0: wait for every rank (or the deadline), check the world; '' when all is well."""
    world = info.world_size
    keys = [f"{prefix}/facts/{r}" for r in range(world)]
    deadline = t0 + limit
    while True:
        missing = [r for r, key in enumerate(keys) if not store.check([key])]
        twice = [r for r in range(world) if store.check([f"{prefix}/twice/{r}"])]
        if not missing or twice or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    facts = [json.loads(store.get(k)) for r, k in enumerate(keys) if r not in missing]
    if twice:
        hosts = {r: store.get(f"{prefix}/twice/{r}").decode() for r in twice}
        first = {f["rank"]: f["host"] for f in facts}
        where = "; ".join(f"rank {r} on {first.get(r, '?')} and again on {h}" for r, h in hosts.items())
        return _fail(
            [
                Problem(
                    ",".join(sorted(set(hosts.values()))),
                    f"a rank started twice: {where}",
                    "the launcher's rank variable is wrong for this launcher "
                    "(see hpc_launch/train/dist.py CONVENTIONS)",
                )
            ]
        )
    if missing:
        shown = ", ".join(map(str, missing[:16])) + (" ..." if len(missing) > 16 else "")
        came = sorted({f["host"] for f in facts})
        return _fail(
            [
                Problem(
                    ",".join(came),
                    f"{len(missing)} of {world} rank(s) never arrived within {limit:.0f} s (ranks {shown}); "
                    f"arrived from: {', '.join(came)}",
                    f"check that the launcher starts {world} ranks; raise "
                    f"${protocol.ENV_PREFLIGHT_TIMEOUT} if they start slowly",
                )
            ]
        )
    per_node = env.get(protocol.ENV_RANKS_PER_NODE)
    problems = check(facts, world=world, ranks_per_node=int(per_node) if per_node and per_node.isdigit() else None)
    return _fail(problems) if problems else ""


def _fail(problems: List[Problem]) -> str:
    """Say every problem (rank 0's log), report bad hosts, and return the verdict line."""
    for p in problems:
        if p.bad_host:
            for host in p.host.split(","):
                _say(protocol.report_bad_host(host, f"preflight: {p.fact}"))
        _say(f"{protocol.PREFLIGHT_FAILED}{p.host}: {p.fact}; fix: {p.fix}")
    first = problems[0]
    more = f" (and {_plural(len(problems) - 1, 'more problem')} above)" if len(problems) > 1 else ""
    return f"the job is not what was asked on {first.host}: {first.fact}{more}"


def probe(info: RankInfo, *, device: str, seconds: float) -> None:
    """One small all-reduce across all ranks: it must add up, and its speed is printed (rank 0)."""
    import torch
    import torch.distributed as tdist

    n = PROBE_BYTES // 4
    x = torch.full((n,), float(info.rank + 1), dtype=torch.float32, device=device)
    tdist.all_reduce(x)  # the first one sets up the connections
    want = info.world_size * (info.world_size + 1) / 2
    if float(x[0]) != want:
        raise PreflightError(
            f"the all-reduce across {info.world_size} ranks added up to {float(x[0])}, not {want}",
            hint="the interconnect or the backend is broken on some host: rerun with NCCL_DEBUG=INFO",
        )
    x.fill_(1.0)
    t = time.monotonic()
    tdist.all_reduce(x)
    if device != "cpu":
        torch.cuda.synchronize() if device.startswith("cuda") else None
    took = time.monotonic() - t
    times: List = [None] * info.world_size
    tdist.all_gather_object(times, (socket.gethostname(), took))
    if info.rank == 0:
        slowest = max(times, key=lambda ht: ht[1])
        # bus bandwidth as nccl-tests reports it: 2(n-1)/n x bytes / time
        bus = 2 * (info.world_size - 1) / info.world_size * PROBE_BYTES / max(slowest[1], 1e-9) / 1e9
        hosts = len({h for h, _ in times})
        # one rank moves nothing over a bus (2(n-1)/n = 0): a speed would read as a broken link
        speed = f"{bus:.2f} GB/s bus, slowest {slowest[0]}" if info.world_size > 1 else "one rank: no bus to measure"
        _say(
            f"{protocol.PREFLIGHT_OK}{_plural(info.world_size, 'rank')} on {_plural(hosts, 'host')}: ranks, threads, "
            f"devices and interfaces as planned; all-reduce {PROBE_BYTES >> 20} MiB in {slowest[1] * 1000:.1f} ms "
            f"({speed}); gate {seconds + took:.1f} s"
        )
