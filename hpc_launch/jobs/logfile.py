"""A job's log as a whole: read once, wherever the job ran (following it is logs.py/follow.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..logs import LogTail
from ..records import JobRecord
from .connect import transport_for

if TYPE_CHECKING:
    from ..capsule import Capsule


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


def capsule_of(record: JobRecord) -> "Capsule":
    """What was submitted as `record`, and what each of its starts found (`hpc-launch show`)."""
    from ..capsule import load

    return load(record, transport_for(record.host))
