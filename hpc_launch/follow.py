"""Follow a recorded job's log to its end (`logs -f`, `submit --follow`); exit with its code."""

from __future__ import annotations

import sys
from typing import Optional

from .logs import LogTail, follow, format_summary, read_exit_code, summarise_log
from .records import JobRecord, JobStore
from .states import JobState
from .tracker import state_poller
from .transport import open_transport


def _exit_code(state: JobState, code: Optional[int]) -> int:
    if code is not None:
        return code if 0 <= code < 256 else 1
    return 0 if state == JobState.DONE else 1


def follow_job(record: JobRecord, *, store: Optional[JobStore] = None, summary: bool = False) -> int:
    store = store or JobStore()
    transport = open_transport(None if record.host == "localhost" else record.host)
    status = None
    if sys.stderr.isatty():
        from rich.console import Console

        status = Console(stderr=True).status(f"{record.job_id} queued: waiting for {record.log_path}")
    collected = []

    def on_wait(seconds: float) -> None:
        if status is not None:
            status.update(f"{record.job_id} on {record.cluster}: queued for {int(seconds)} s, waiting for its log")
            status.start()

    def write(text: str) -> None:
        if status is not None:
            status.stop()
        sys.stdout.write(text)
        sys.stdout.flush()
        if summary:
            collected.append(text)

    try:
        final = follow(transport, record.log_path, state=state_poller(transport, record, store), write=write, on_wait=on_wait)
    finally:
        if status is not None:
            status.stop()
    rec = store.get(record.job_id, record.cluster)
    code = rec.exit_code if rec.exit_code is not None else read_exit_code(transport, record.exit_path)
    sys.stderr.write(f"hpc-launch: job {record.job_id} {final.value}" + (f" with exit code {code}" if code is not None else "") + "\n")
    if summary:
        sys.stderr.write(format_summary(summarise_log("".join(collected))) + "\n")
    return _exit_code(final, code)


def read_whole_log(record: JobRecord) -> str:
    transport = open_transport(None if record.host == "localhost" else record.host)
    tail = LogTail(transport, record.log_path)
    text, chunk = "", tail.read_new()
    while chunk:
        text += chunk
        chunk = tail.read_new()
    return text
