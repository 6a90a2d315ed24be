"""--notify's outbox: every message a job composes, kept in a file beside its log, so that a
message the job could not send is never lost and the side that has a network can send it.

    NAME.oJOB.notify        the job's messages, one JSON object a line, appended by the job only:
                            {"id", "event", "via", "subject", "text", "at", "sent", "relay", "why"}
                            `sent`: the job posted it itself; `relay`: the job left it to whoever
                            refreshes the job (`hpc-launch status`, `list -r`, `logs -f`)
    NAME.oJOB.notify.sent   the ids the relay has sent, one a line, written under the lock only
    NAME.oJOB.notify.lock   a directory: the relay holding it is the only one sending

The outbox holds messages and the NAME of the variable with the webhook or mail address (`via`),
never its value: the relay reads the value from its own environment. Standard library only:
the job writes it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Dict, Iterable, List, Set

OUTBOX_SUFFIX = ".notify"  # after the log's name, like the exit-code file
SENT_SUFFIX = ".sent"
LOCK_SUFFIX = ".lock"
MAX_BYTES = 1 << 20  # a job sends a few messages per link: more is not an outbox of ours


def outbox_path_for(log_path: str) -> str:
    return log_path + OUTBOX_SUFFIX


@dataclass(frozen=True)
class Entry:
    id: str
    event: str
    via: str  # the variable's name
    subject: str
    text: str
    at: float
    sent: bool  # by the job itself
    relay: bool  # left for the relay (False: the route was `direct` and the job's tries failed)
    why: str = ""  # the job's last failure, masked


def append(path: str, entry: Entry) -> None:
    """One line, one write, to a file only this user can read (a message may name hosts and paths)."""
    line = json.dumps(entry.__dict__, sort_keys=True) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def parse(data: bytes) -> List[Entry]:
    """The outbox's entries; a line cut short (the job killed mid-write) or not ours is skipped."""
    out: List[Entry] = []
    for line in data.decode("utf-8", "replace").splitlines():
        try:
            d = json.loads(line)
            out.append(
                Entry(
                    id=str(d["id"]),
                    event=str(d["event"]),
                    via=str(d["via"]),
                    subject=str(d.get("subject", "")),
                    text=str(d["text"]),
                    at=float(d.get("at", 0)),
                    sent=bool(d.get("sent")),
                    relay=bool(d.get("relay", True)),
                    why=str(d.get("why", "")),
                )
            )
        except (ValueError, KeyError, TypeError):
            continue
    return out


def parse_sent(data: bytes) -> Set[str]:
    return {line.strip() for line in data.decode("utf-8", "replace").splitlines() if line.strip()}


def sent_text(ids: Iterable[str]) -> str:
    return "".join(f"{i}\n" for i in sorted(set(ids)))


@dataclass(frozen=True)
class Tally:
    """Where a job's messages stand: what `status` shows."""

    sent: int = 0
    pending: int = 0  # waiting for the relay
    failed: int = 0  # the job's tries failed and its route (`direct`) leaves nothing to a relay
    why: str = ""  # the latest reason one is not sent
    ended: bool = False  # the job's end message is in the outbox

    def as_dict(self) -> Dict[str, object]:
        return dict(sent=self.sent, pending=self.pending, failed=self.failed, why=self.why, ended=self.ended)


def tally(entries: List[Entry], relayed: Set[str], why: str = "") -> Tally:
    sent = sum(1 for e in entries if e.sent or e.id in relayed)
    pending = [e for e in entries if not e.sent and e.id not in relayed and e.relay]
    failed = [e for e in entries if not e.sent and e.id not in relayed and not e.relay]
    reason = why or next((e.why for e in reversed(pending + failed) if e.why), "")
    return Tally(sent, len(pending), len(failed), reason, any(e.event == "end" for e in entries))
