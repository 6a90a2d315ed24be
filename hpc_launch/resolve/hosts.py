"""Where the job runs: the host list (pods), the hosts kept off (--exclude) and the spares held,
and --gather's port where the other hosts announce themselves."""

from __future__ import annotations

from typing import List, Tuple

from msgspec.structs import replace

from .. import dialects
from ..site import launchers
from ..errors import SpecError
from ..site.profiles import Profile
from ..spec import JobSpec
from .common import MAX_SPARES, check_token


def without_excluded(spec: JobSpec, p: Profile, dialect: dialects.Dialect) -> JobSpec:
    """With no scheduler the host list itself leaves the --exclude hosts out."""
    if spec.exclude and not dialect.has_scheduler:
        listed = spec.hosts if spec.hosts is not None else p.hosts
        spec = replace(spec, hosts=[h for h in listed if h not in spec.exclude])
    return spec


def listed_hosts(spec: JobSpec, p: Profile) -> List[str]:
    """--hosts (or the profile's hosts:), each a plain name and named once."""
    hosts = list(spec.hosts if spec.hosts is not None else p.hosts)
    seen: set = set()
    for host in hosts:
        check_token(host, "host", "hosts are names or IP addresses")
        if host in seen:  # DeepSpeed refuses a hostfile naming a host twice
            raise SpecError(
                f"host {host} is listed twice in --hosts (or the profile's hosts:)",
                hint="name each host once; --gpus-per-node sets the ranks on each",
            )
        seen.add(host)
    return hosts


def avoidance(
    spec: JobSpec, dialect: dialects.Dialect, launcher: launchers.Launcher, hosts: List[str]
) -> Tuple[List[str], int]:
    """The hosts to keep the job off and the spare nodes to hold, checked."""
    exclude: List[str] = []
    for host in spec.exclude or []:
        check_token(host, "--exclude host", "give host names as the scheduler names them")
        if host not in exclude:
            exclude.append(host)
    if exclude and dialect.has_scheduler and not dialect.supports(dialects.HostExclusion):
        raise SpecError(
            f"{dialect.title} cannot keep a job off named hosts (--exclude {','.join(exclude)})",
            hint="hold spare nodes instead: --spares K trains on the --nodes that pass the start-up check",
        )
    spares = spec.spares or 0
    failover = spec.failover or 0
    if isinstance(failover, int) and not isinstance(failover, bool) and 0 < failover <= MAX_SPARES:
        spares = max(spares, failover)  # --failover N holds N spares (at least)
    if isinstance(spares, bool) or not isinstance(spares, int) or not 0 <= spares <= MAX_SPARES:
        raise SpecError(f"--spares must be a whole number from 0 to {MAX_SPARES}, not {spares!r}")
    what = "--failover" if failover else "--spares"
    if spares and not dialect.has_scheduler:
        raise SpecError(
            f"{what} needs a scheduler that allocates the nodes",
            hint="on pods list more --hosts than --nodes: the job uses the first that answer",
        )
    if spares and not launcher.places_by_hostfile:
        raise SpecError(
            f"{what}: the {launcher.name} launcher places ranks on every allocated node, not on a chosen few",
            hint=(
                "this scheduler can exclude hosts instead: --exclude "
                "HOST (and hosts found bad are excluded by themselves)"
            ),
        )
    return exclude, spares


def check_gather(spec: JobSpec, p: Profile, dialect: dialects.Dialect, launcher: launchers.Launcher) -> None:
    """--gather PORT: the other hosts announce their addresses when the job starts (hpc_launch/gather.py)."""
    if spec.gather is None:
        return
    if dialect.has_scheduler or not launcher.over_ssh:
        raise SpecError(
            f"--gather is for machines with no scheduler reached over ssh; {p.name} finds its nodes itself",
            hint="drop --gather, or use --cluster pods",
        )
    if not isinstance(spec.gather, int) or not 1024 <= spec.gather <= 65535:
        raise SpecError(f"--gather {spec.gather}: the port must be 1024-65535", hint="e.g. --gather 29400")
    if not p.net_if:
        raise SpecError(
            f"--gather needs `net_if` in the {p.name} profile: the interface whose address the others announce to",
            hint="set net_if: eth0 (or your pods' interface) in your profile",
        )
    assert isinstance(spec.nodes, int)  # the nodes rule ran first
    if spec.nodes < 2:
        raise SpecError(
            "--gather with one node: no other host to wait for",
            hint="pass --nodes N (this machine and N-1 that announce), or --hosts THIS,POD2,... naming them",
        )


def hosts_for_nodes(
    spec: JobSpec, p: Profile, dialect: dialects.Dialect, launcher: launchers.Launcher, hosts: List[str]
) -> List[str]:
    """With no scheduler, the first --nodes of the host list (unless --gather fills it at start-up)."""
    if dialect.has_scheduler or (spec.gather is not None and not hosts):
        return hosts
    assert isinstance(spec.nodes, int)  # the nodes rule ran first
    if not hosts:
        raise SpecError(
            f"{p.name} has no node list",
            hint=(
                "pass --hosts pod1,pod2 (names or IPs reachable over ssh), "
                "set `hosts:` in your profile, or --gather PORT --nodes N"
            ),
        )
    if launcher.single_node and spec.nodes > 1:
        raise SpecError(
            f"{p.name} runs on this machine only", hint="use --nodes 1, or the `pods` cluster for several machines"
        )
    if spec.nodes > len(hosts):
        raise SpecError(
            f"--nodes {spec.nodes} but {p.name} knows only {len(hosts)} host(s): {', '.join(hosts)}",
            hint=f"pass --hosts with {spec.nodes} hosts or use --nodes {len(hosts)}",
        )
    return hosts[: spec.nodes]
