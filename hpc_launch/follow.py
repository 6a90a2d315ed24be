"""Follow a recorded job's log to its end (`logs -f`, `submit --follow`); exit with its code."""

from __future__ import annotations

import sys
from typing import Optional

from .logs import LogTail, follow, format_summary, read_exit_code, summarise_log
from .records import JobRecord, JobStore
from .states import JobState
from .jobs import state_poller
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
    said = {"comment": record.comment}

    def on_wait(seconds: float) -> None:
        if status is not None:
            why = f" ({said['comment']})" if said["comment"] else ""
            status.update(f"{record.job_id} on {record.cluster}: queued for {int(seconds)} s{why}, waiting for its log")
            status.start()

    def on_comment(comment: str) -> None:
        said["comment"] = comment
        if status is None:  # not a terminal: one plain line per change
            sys.stderr.write(f"hpc-launch: {record.job_id}: the scheduler says: {comment}\n")

    def write(text: str) -> None:
        if status is not None:
            status.stop()
        sys.stdout.write(text)
        sys.stdout.flush()
        if summary:
            collected.append(text)

    def on_reconnect(reason: str, delay: float) -> None:
        if status is not None:
            status.stop()
        sys.stderr.write(f"hpc-launch: lost contact with {record.host} ({reason}); trying again in {delay:.0f} s (the job is not affected)\n")

    try:
        final = follow(transport, record.log_path, state=state_poller(transport, record, store, on_comment=on_comment),
                       write=write, on_wait=on_wait, script=record.script_name, on_reconnect=on_reconnect)
    except KeyboardInterrupt:
        sys.stderr.write(f"\nhpc-launch: stopped following; job {record.job_id} keeps running on {record.cluster}. "
                         f"Reattach: hpc-launch logs -f {record.job_id}   Stop it: hpc-launch cancel {record.job_id}\n")
        return 130
    finally:
        if status is not None:
            status.stop()
    rec = store.get(record.job_id, record.cluster)
    code = rec.exit_code if rec.exit_code is not None else read_exit_code(transport, record.exit_path, record.script_name)
    why = f" ({rec.comment})" if rec.comment else ""
    sys.stderr.write(f"hpc-launch: job {record.job_id} {final.value}" + (f" with exit code {code}" if code is not None else "") + why + "\n")
    if summary:
        sys.stderr.write(format_summary(summarise_log("".join(collected))) + "\n")
    return _exit_code(final, code)


def read_whole_log(record: JobRecord) -> str:
    transport = open_transport(None if record.host == "localhost" else record.host)
    tail = LogTail(transport, record.log_path, record.script_name)
    text, chunk = "", tail.read_new()
    while chunk:
        text += chunk
        chunk = tail.read_new()
    if not tail.exists:  # no file, or only an earlier job's lines in it
        raise FileNotFoundError(record.log_path)
    return text
