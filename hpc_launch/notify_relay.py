"""--notify's relay: whoever refreshes a job (`hpc-launch status`, `list -r`, `logs -f`, on the
login node or on the laptop: the side with a network) sends the messages the job left in its
outbox (notify_outbox.py), exactly once, and records where they stand for `status`.

Exactly once: the relay sends only under the outbox's lock (a directory, made atomically by
`mkdir` where the job's files are, so two relays on two machines exclude each other) and writes
each id to the sent-marker file as soon as the webhook took it. Only a relay killed between the
webhook's answer and that write (milliseconds) would send that message again at the next refresh.

The URL is read from THIS side's environment, by the variable name the job recorded: the job's
copy never leaves the job. A relay without the variable set says so in `status` and keeps the
messages for one that has it.
"""

from __future__ import annotations

import os
import re
import time
from typing import Dict, List, Mapping, Optional, Tuple

from . import notify, notify_outbox
from .errors import HpcLaunchError
from .protocol import EXIT_FILE_SUFFIX
from .records import JobRecord, JobStore
from .states import JobState
from .transport.base import Transport

KEY = "notify"  # record.extra: {"via": NAME or "", "size": bytes seen, **Tally, "done": bool}
RELAY_TIMEOUT_S = 8.0  # one try per message per refresh: the next refresh tries again
STALE_LOCK_MIN = 2  # a lock older than this was left by a relay that died
END_GRACE_S = 120.0  # a job's end message follows its exit-code file by at most 30 s (notify.deliver)
_URL_FROM = re.compile(rb"--url-from (\S+)")


def log_of(rec: JobRecord) -> str:
    return rec.exit_path[: -len(EXIT_FILE_SUFFIX)] if rec.exit_path.endswith(EXIT_FILE_SUFFIX) else rec.log_path


def wanted(rec: JobRecord) -> bool:
    """Does a refresh owe this job a look at its outbox?"""
    state = (rec.extra or {}).get(KEY)
    if not isinstance(state, dict):
        return not JobState(rec.state).terminal  # never looked: a job that ended before is not chased
    return bool(state.get("via")) and not state.get("done")


def words(rec: JobRecord) -> str:
    """`status`'s notify column: `2 sent`, `1 pending: ConnectionRefusedError ...`, `1 failed: ...`."""
    state = (rec.extra or {}).get(KEY)
    if not isinstance(state, dict) or not state.get("via"):
        return ""
    parts = [f"{state.get('sent', 0)} sent"]
    if state.get("pending"):
        parts.append(f"{state['pending']} pending")
    if state.get("failed"):
        parts.append(f"{state['failed']} failed")
    said = ", ".join(parts)
    why = state.get("why") or ""
    return f"{said}: {why}" if why and (state.get("pending") or state.get("failed") or state.get("missing")) else said


def as_json(rec: JobRecord) -> Optional[Dict[str, object]]:
    """`status --json`'s `notify`: null for a job without --notify."""
    state = (rec.extra or {}).get(KEY)
    if not isinstance(state, dict) or not state.get("via"):
        return None
    return {k: state.get(k, d) for k, d in (("sent", 0), ("pending", 0), ("failed", 0), ("why", ""), ("done", False))}


def relay(store: JobStore, records: List[JobRecord], transport: Transport, env: Mapping[str, str] = os.environ) -> None:
    """Send what these jobs (all on `transport`'s host) left for a relay; record where each stands.
    Never raises for a job's files or a webhook: that is what `status` then says."""
    down: Dict[str, str] = {}  # a webhook that failed this time is not tried again for the next job
    for rec in records:
        if not wanted(rec):
            continue
        try:
            _relay_one(store, store.get(rec.job_id, rec.cluster), transport, env, down)
        except (OSError, HpcLaunchError):
            continue


def _via(rec: JobRecord, transport: Transport) -> str:
    """The variable the job's script names (`--url-from NAME`), or "" for a job without --notify."""
    try:
        m = _URL_FROM.search(transport.read_from(rec.script_path, 0, 1 << 18))
    except (OSError, HpcLaunchError):
        return ""
    return m.group(1).decode("ascii", "replace") if m else ""


def _read(transport: Transport, path: str, limit: int = notify_outbox.MAX_BYTES) -> bytes:
    try:
        return transport.read_from(path, 0, limit)
    except (OSError, HpcLaunchError):
        return b""


def _relay_one(
    store: JobStore, rec: JobRecord, transport: Transport, env: Mapping[str, str], down: Dict[str, str]
) -> None:
    known = dict((rec.extra or {}).get(KEY) or {})
    if "via" not in known:
        known["via"] = _via(rec, transport)
    if not known["via"]:
        _store(store, rec, known)
        return
    outbox = notify_outbox.outbox_path_for(log_of(rec))
    size = transport.size(outbox)
    terminal = JobState(rec.state).terminal
    if size == known.get("size") and not known.get("pending") and not terminal:
        return  # nothing new since the last look
    # only messages for the variable the job's own script names: a line naming another is not ours to send
    entries = [e for e in notify_outbox.parse(_read(transport, outbox) if size else b"") if e.via == known["via"]]
    sent_path = outbox + notify_outbox.SENT_SUFFIX
    relayed = notify_outbox.parse_sent(_read(transport, sent_path))
    pending = [e for e in entries if e.relay and not e.sent and e.id not in relayed]
    why = ""
    if pending:
        relayed, why = _send(transport, outbox, pending, env, down)
    tally = notify_outbox.tally(entries, relayed, why)
    known.update(size=size, **tally.as_dict())
    ended_long_ago = terminal and time.time() - (rec.end_time or time.time()) > END_GRACE_S
    known["missing"] = ended_long_ago and not tally.ended
    if known["missing"]:
        known["why"] = "the job ended without sending its end message (killed before its exit trap ran)"
    known["done"] = terminal and (tally.ended or ended_long_ago) and not tally.pending
    _store(store, rec, known)


def _send(
    transport: Transport,
    outbox: str,
    pending: List[notify_outbox.Entry],
    env: Mapping[str, str],
    down: Dict[str, str],
) -> Tuple[set, str]:
    """Under the outbox's lock: (the ids sent, counting earlier relays', why the rest are not)."""
    sent_path = outbox + notify_outbox.SENT_SUFFIX
    via = pending[0].via  # the script's: relay_one keeps no other
    url = env.get(via, "")
    if not url:
        return notify_outbox.parse_sent(_read(transport, sent_path)), (
            f"${via} is not set where the relay runs (set it in this shell and run `hpc-launch status` again)"
        )
    if via in down:
        return notify_outbox.parse_sent(_read(transport, sent_path)), down[via]
    lock = outbox + notify_outbox.LOCK_SUFFIX
    if not _lock(transport, lock):
        sent = notify_outbox.parse_sent(_read(transport, sent_path))
        # the relay holding the lock may already have sent them all: then there is nothing to say
        # (a stale "sending now" would stay on a job whose messages are done, and never be looked at again)
        return sent, "" if all(e.id in sent for e in pending) else "another hpc-launch is sending them now"
    try:
        sent = notify_outbox.parse_sent(_read(transport, sent_path))  # what a relay before us sent
        for entry in pending:
            if entry.id in sent:
                continue
            why = notify.send(url, entry.text, RELAY_TIMEOUT_S)
            if why is not None:
                down[via] = f"the relay's try failed: {why}"
                return sent, down[via]
            sent.add(entry.id)
            transport.put_text(sent_path, notify_outbox.sent_text(sent), 0o600)
        return sent, ""
    finally:
        transport.run(["rmdir", lock], timeout=30)


def _lock(transport: Transport, lock: str) -> bool:
    if transport.run(["mkdir", lock], timeout=30).rc == 0:
        return True
    stale = transport.run(["find", lock, "-maxdepth", "0", "-mmin", f"+{STALE_LOCK_MIN}"], timeout=30)
    if stale.rc == 0 and stale.out.strip():  # its relay died holding it
        transport.run(["rmdir", lock], timeout=30)
        return transport.run(["mkdir", lock], timeout=30).rc == 0
    return False


def _store(store: JobStore, rec: JobRecord, known: Dict[str, object]) -> None:
    if (rec.extra or {}).get(KEY) != known:
        store.update(rec.cluster, rec.job_id, extra={**(rec.extra or {}), KEY: known})
