"""--notify's relay: whoever refreshes a job (`hpc-launch status`, `list -r`, `logs -f`, on the
login node or on the laptop: the side with a network) sends the messages the job left in its
outbox (notify/outbox.py), exactly once, and records where they stand for `status`.

Exactly once: the relay sends only under the outbox's lock (a directory, made atomically by
`mkdir` where the job's files are, so two relays on two machines exclude each other) and writes
each id to the sent-marker file as soon as the webhook took it. Only a relay killed between the
webhook's answer and that write (milliseconds), or while a slow webhook held its POST, would send
that message again at the next refresh. The lock names its holder (`HOST PID START`): a relay on
the same host takes it over as soon as that process is gone (kill -9, a closed terminal), any other
once it is STALE_LOCK_MIN old. A message not sent a day after the job ended is given up, with the
reason, so `status` says so instead of carrying it for ever.

The URL is read from THIS side's environment, by the variable name the job recorded: the job's
copy never leaves the job. A relay without the variable set says so in `status` and keeps the
messages for one that has it.
"""

from __future__ import annotations

import dataclasses
import os
import re
import socket
import time
from typing import Dict, List, Mapping, Optional, Tuple

from .. import notify
from ..errors import HpcLaunchError
from ..protocol import EXIT_FILE_SUFFIX
from ..records import JobRecord, JobStore
from ..states import JobState
from ..transport.base import Transport
from . import outbox as notify_outbox

KEY = "notify"  # record.extra: {"via": NAME or "", "size": bytes seen, **Tally, "done": bool}
RELAY_TIMEOUT_S = 8.0  # one try per message per refresh: the next refresh tries again
STALE_LOCK_MIN = 2  # a lock older than this was left by a relay that died
HOLDER = "holder"  # in the lock: `HOST PID START` of the relay holding it
TAKEOVER_SUFFIX = ".takeover"
GIVE_UP_S = 24 * 3600.0  # a message not sent within a day of the job's end is given up, with its reason
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
        # what is owed, stored before the first try: a relay killed mid-POST (kill -9, Ctrl-C) must
        # leave the job owed, or an ended job never looked at before is never looked at again
        _store(store, rec, {**known, **notify_outbox.tally(entries, relayed).as_dict(), "done": False})
        rec = store.get(rec.job_id, rec.cluster)
        relayed, why = _send(transport, outbox, pending, env, down)
    tally = notify_outbox.tally(entries, relayed, why)
    if terminal and tally.pending and time.time() - (rec.end_time or time.time()) > GIVE_UP_S:
        tally = dataclasses.replace(
            tally,
            pending=0,
            failed=tally.failed + tally.pending,
            why=f"given up a day after the job ended; the last try: {tally.why or 'none'}",
        )
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
        _release(transport, lock)


def _lock(transport: Transport, lock: str) -> bool:
    """Take the outbox's lock, or take it over from a relay that died holding it: one of this host
    whose process is gone (kill -9, a closed laptop lid's lost session) at once, any other once
    the lock is STALE_LOCK_MIN old (no relay holds it that long: one try per message)."""
    if _claim(transport, lock):
        return True
    holder = _read(transport, f"{lock}/{HOLDER}", 256).decode("utf-8", "replace")
    stale = transport.run(["find", lock, "-maxdepth", "0", "-mmin", f"+{STALE_LOCK_MIN}"], timeout=30)
    if not (_holder_gone(holder) or (stale.rc == 0 and stale.out.strip())):
        return False
    takeover = lock + TAKEOVER_SUFFIX  # two relays that both found it dead: one takes it over
    if transport.run(["mkdir", takeover], timeout=30).rc != 0:
        return False
    try:
        if _read(transport, f"{lock}/{HOLDER}", 256).decode("utf-8", "replace") != holder:
            return False  # taken over by another relay in the meantime
        _release(transport, lock)
        return _claim(transport, lock)
    finally:
        transport.run(["rmdir", takeover], timeout=30)


def _claim(transport: Transport, lock: str) -> bool:
    if transport.run(["mkdir", lock], timeout=30).rc != 0:
        return False
    try:
        transport.put_text(f"{lock}/{HOLDER}", _me(), 0o600)
    except (OSError, HpcLaunchError):
        pass  # a lock without its holder is taken over by its age
    except BaseException:  # Ctrl-C between the two: no lock of nobody's is left
        _release(transport, lock)
        raise
    return True


def _release(transport: Transport, lock: str) -> None:
    transport.run(["rm", "-rf", "--", lock], timeout=30)  # the lock dir, its holder, a half-written holder


def _me() -> str:
    pid = os.getpid()
    return f"{socket.gethostname()} {pid} {_started(pid)}\n"


def _started(pid: int) -> str:
    """A process's start (clock ticks since boot, Linux's /proc; "" elsewhere): a reused pid has
    another; "Z" for a zombie (killed, not yet reaped: gone all the same)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return ""
    return "Z" if fields[:1] == [b"Z"] else fields[19].decode() if len(fields) > 19 else ""


def _holder_gone(holder: str) -> bool:
    """Did the lock's holder, `HOST PID START` as it wrote itself, run on this host and end?"""
    parts = holder.split()
    if len(parts) not in (2, 3) or parts[0] != socket.gethostname() or not parts[1].isdigit():
        return False  # another host's relay (or none written): the lock's age decides
    pid = int(parts[1])
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return True  # another user's process has the pid now: the relay (ours) is gone
    now = _started(pid)
    return now == "Z" or (len(parts) == 3 and bool(now) and now != parts[2])


def _store(store: JobStore, rec: JobRecord, known: Dict[str, object]) -> None:
    if (rec.extra or {}).get(KEY) != known:
        store.update(rec.cluster, rec.job_id, extra={**(rec.extra or {}), KEY: known})
