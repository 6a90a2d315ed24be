"""A job's log as a whole: read once, wherever the job ran (following it is logs.py/follow.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, List

from ..logs import LogTail
from ..records import JobRecord
from ..transport.base import Transport
from .connect import transport_for

if TYPE_CHECKING:
    from ..capsule_read import Capsule


def read_whole_log(record: JobRecord) -> str:
    transport = transport_for(record.host)
    tail = LogTail(transport, record.log_path, record.script_name)
    text, chunk = "", tail.read_new()
    while chunk:
        text += chunk
        chunk = tail.read_new()
    if not tail.exists:  # no file, or only an earlier job's lines in it
        raise FileNotFoundError(record.log_path)
    return text


def log_text_or_empty(record: JobRecord) -> str:
    try:
        return read_whole_log(record)
    except FileNotFoundError:
        return ""


def array_tasks(record: JobRecord) -> List[JobRecord]:
    """The tasks of a job the user made an array (`-J 1-2`), each with its own log; [] otherwise."""
    from .groups import subjobs_of

    opened: List[Transport] = []

    def transport() -> Transport:  # opened only for an id the scheduler gives arrays
        if not opened:
            opened.append(transport_for(record.host))
        return opened[0]

    try:
        return subjobs_of(transport, record)
    finally:
        for t in opened:
            t.close()


def capsule_of(record: JobRecord) -> "Capsule":
    """What was submitted as `record`, and what each of its starts found (`hpc-launch show`)."""
    from ..capsule_read import load

    return load(record, transport_for(record.host))
