"""What reading a job also does once its new state is stored (`state.store_outcome`, `refresh`,
`state_poller`), named so no caller is surprised: `AFTER_ENDING` for a job that has just ended
(its bad hosts recorded for the cluster, its chain's waiting links moved off them) and
`AFTER_READING` for every read (the --notify messages its jobs left for a relay are sent)."""

from __future__ import annotations

import re
from typing import Any, Callable, Dict, List, Tuple

from .. import dialects
from ..dialects import ChainHandOff, PendingExclusion
from ..errors import HpcLaunchError
from ..notify import relay as notify_relay
from ..protocol import BAD_HOST_TTL_S, kept_off_in, parse_bad_hosts_file
from ..records import JobRecord, JobStore, recordable_bad_hosts
from ..states import JobState
from ..transport.base import Transport
from .outcome import Outcome, log_tail, runner


def record_bad_hosts(
    store: JobStore, rec: JobRecord, got: Outcome, transport: Transport, extra: Dict[str, Any]
) -> None:
    """After-step: the hosts a job that just ended found bad, remembered for its cluster (later
    jobs avoid them) and in its record's `extra["bad_hosts"]`."""
    here = not dialects.get(rec.dialect).has_scheduler  # its hosts may be this machine (records.py)
    bad = recordable_bad_hosts(bad_hosts_of(transport, rec, got), here=here)
    if bad:
        extra["bad_hosts"] = store.add_bad_hosts(rec.cluster, bad, rec.job_id, BAD_HOST_TTL_S)


def keep_waiting_links_off(
    store: JobStore, rec: JobRecord, got: Outcome, transport: Transport, extra: Dict[str, Any]
) -> None:
    """After-step: once a link found bad hosts, its chain's links that wait are changed to avoid
    them, where the scheduler can change a waiting job (`avoid_in_later_links`)."""
    if extra.get("bad_hosts"):
        avoid_in_later_links(store, rec, transport)


def relay_notifications(store: JobStore, records: List[JobRecord], transport: Transport) -> None:
    """After-step: this side has a network: send the --notify messages the jobs could not."""
    notify_relay.relay(store, records, transport)


AfterEnding = Callable[[JobStore, JobRecord, "Outcome", Transport, Dict[str, Any]], None]
AfterReading = Callable[[JobStore, List[JobRecord], Transport], None]
# What storing a job's new state also does, in order, when the job has just ended (its record's
# `extra` is written after them: a step may add to it).
AFTER_ENDING: Tuple[Tuple[str, AfterEnding], ...] = (
    ("record the hosts it found bad", record_bad_hosts),
    ("keep the chain's waiting links off them", keep_waiting_links_off),
)
# What reading jobs also does, once their states are stored (`state_poller`: at a change of state
# and every RELAY_EVERY_S).
AFTER_READING: Tuple[Tuple[str, AfterReading], ...] = (("relay notifications", relay_notifications),)


def bad_hosts_of(transport: Transport, rec: JobRecord, got: Outcome) -> Dict[str, str]:
    """host -> reason: what the job's own checks wrote (its bad-hosts file) and, for a failure,
    the scheduler's word in the log naming a node that failed (the dialect's `node_failure`)."""
    bad: Dict[str, str] = {}
    try:
        data = transport.read_from(rec.bad_hosts_path, 0, 65536)
        bad.update(parse_bad_hosts_file(data.decode("utf-8", "replace")))
    except (OSError, HpcLaunchError):
        pass
    patterns = dialects.scheduler_words(dialects.get(rec.dialect), "node_failure")
    if got.state == JobState.FAILED and patterns:
        tail = log_tail(transport, rec)
        for pattern in patterns:
            for m in re.finditer(pattern, tail, re.M):
                bad.setdefault(m.group("host"), f"node failure: {m.group(0).strip()[:200]}")
    return bad


def avoid_in_later_links(store: JobStore, rec: JobRecord, transport: Transport) -> List[str]:
    """Keep the chain's links that have not started off every host remembered as bad, where the
    scheduler can change a pending job (Slurm). Returns the ids of the links changed.

    The link itself did so for the next link as it ended (`keep_dependents_off_shell`), often long
    before this runs: its log's kept-off lines are recorded for those links' summaries."""
    chain = (rec.extra or {}).get("chain")
    dialect = dialects.get(rec.dialect)
    hosts = sorted({b.host for b in store.bad_hosts(rec.cluster)})
    if not chain or not hosts or not isinstance(dialect, PendingExclusion):
        return []
    kept_off = kept_off_in(log_tail(transport, rec)) if dialect.supports(ChainHandOff) else {}
    changed = []
    for later in store.list(cluster=rec.cluster, limit=10000):
        extra = later.extra or {}
        if later.job_id in kept_off and extra.get("chain") == chain:
            extra = {**extra, "excluded": sorted(set(extra.get("excluded", [])) | set(kept_off[later.job_id]))}
            store.update(later.cluster, later.job_id, extra=extra)
            changed.append(later.job_id)
        elif (
            extra.get("chain") == chain
            and extra.get("link", 0) > (rec.extra or {}).get("link", 0)
            and JobState(later.state) == JobState.QUEUED
        ):
            # the list replaces the link's own (Slurm's ExcNodeList): keep what it was submitted with
            keep_off = sorted(set(hosts) | set(extra.get("excluded", [])))
            argv = dialect.exclude_pending_argv(later.job_id, keep_off)
            result = runner(transport, later)(argv or [])
            if result.rc == 0:
                changed.append(later.job_id)
                store.update(later.cluster, later.job_id, extra={**extra, "excluded": keep_off})
    return changed
