"""Follow a recorded job's log to its end (`logs -f`, `submit --follow`); exit with its code."""

from __future__ import annotations

import re
import sys
import time
from typing import Any, Dict, List, Optional

from .display import LogFilter, format_summary, summarise
from .terminal import visible
from .logs import follow, read_exit_code, read_exit_time
from .records import JobRecord, JobStore
from .states import JobState
from .jobs import poll_for, read_whole_log, state_poller, transport_for
from .jobs.state import start_words
from .protocol import EXIT_SIGINT, FAILOVER_PREFIX, PREEMPTED_PREFIX, REQUEUED_RUN


def _exit_code(state: JobState, code: Optional[int]) -> int:
    if code is not None:
        return code if 0 <= code < 256 else 1
    return 0 if state == JobState.DONE else 1


class _Display:
    """What a follower shows while it follows: the log (filtered) on stdout; on a terminal one
    waiting line (rich's status) that says why the job waits, elsewhere one plain stderr line per
    change of the scheduler's word or start estimate; the filter's notes; lost contact."""

    def __init__(self, record: JobRecord, show_all: bool) -> None:
        self.record = record
        self.status: Any = None
        if sys.stderr.isatty():
            from rich.console import Console

            self.status = Console(stderr=True).status(f"{record.job_id} queued: waiting for {record.log_path}")
        self.collected: List[str] = []
        self.shown = LogFilter(show_all=show_all)
        self.said: Dict[str, Any] = {"comment": record.comment, "note": None, "start": None}

    def on_wait(self, seconds: float) -> None:
        record, said = self.record, self.said
        if self.status is not None:
            start = start_words(said["start"]) if said["start"] is not None else ""
            why = f" (start: {start})" if start else f" ({said['comment']})" if said["comment"] else ""
            # since it was queued, not since this follow began (`seconds`): `logs -f` may come much later
            queued = int(max(seconds, time.time() - record.submit_time))
            self.status.update(f"{record.job_id} on {record.cluster}: queued for {queued} s{why}, waiting for its log")
            self.status.start()

    def on_start(self, rec: JobRecord) -> None:
        # the scheduler's start estimate or pending reason changed: a terminal's waiting line
        # shows it at the next wait; elsewhere one plain line per change
        self.said["start"] = rec
        words = start_words(rec)
        if self.status is None and words:
            sys.stderr.write(f"hpc-launch: {self.record.job_id}: waiting to start: {visible(words)}\n")

    def on_comment(self, comment: str) -> None:
        self.said["comment"] = comment
        if self.status is None:  # not a terminal: one plain line per change
            sys.stderr.write(f"hpc-launch: {self.record.job_id}: the scheduler says: {visible(comment)}\n")

    def write(self, text: str) -> None:
        self.collected.append(text)
        shown, status = self.shown, self.status
        out = shown.feed(text)
        if out:
            if status is not None:
                status.stop()
            sys.stdout.write(out)
            sys.stdout.flush()
        if shown.note != self.said["note"]:
            self.said["note"] = shown.note
            if shown.note and status is not None:
                status.update(f"{self.record.job_id}: {shown.note}")
                status.start()
            elif shown.note:
                sys.stderr.write(f"hpc-launch: {shown.note}\n")

    def on_reconnect(self, reason: str, delay: float) -> None:
        if self.status is not None:
            self.status.stop()
        sys.stderr.write(
            f"hpc-launch: lost contact with {self.record.host} ({reason}); "
            f"trying again in {delay:.0f} s (the job is not affected)\n"
        )

    def stop(self) -> None:
        if self.status is not None:
            self.status.stop()


def follow_job(record: JobRecord, *, store: Optional[JobStore] = None, show_all: bool = False) -> int:
    """Stream the job's log (filtered: `show_all` for everything) until it ends, then print its
    summary; returns the job's exit code for the process to exit with."""
    store = store or JobStore()
    transport = transport_for(record.host)
    display = _Display(record, show_all)
    try:
        final = follow(
            transport,
            record.log_path,
            state=state_poller(transport, record, store, on_comment=display.on_comment, on_start=display.on_start),
            write=display.write,
            on_wait=display.on_wait,
            script=record.script_name,
            on_reconnect=display.on_reconnect,
            poll=poll_for([record]),
            ended=(lambda: transport.size(record.exit_path) is not None) if record.exit_path else None,
        )
    except KeyboardInterrupt:
        sys.stderr.write(
            f"\nhpc-launch: stopped following; job {record.job_id} keeps running on {record.cluster}. "
            f"Reattach: hpc-launch logs -f {record.job_id}   Stop it: hpc-launch cancel {record.job_id}\n"
        )
        return EXIT_SIGINT
    finally:
        display.stop()
    sys.stdout.write(display.shown.flush())
    return _say_end(record, store, transport, final, "".join(display.collected))


def _say_end(record: JobRecord, store: JobStore, transport: Any, final: JobState, log: str) -> int:
    """The summary block and the job's last line; returns its exit code for the process."""
    rec = store.get(record.job_id, record.cluster)
    code = (
        rec.exit_code if rec.exit_code is not None else read_exit_code(transport, record.exit_path, record.script_name)
    )
    script_end = read_exit_time(transport, record.exit_path) if record.exit_path else None
    sys.stderr.write(visible(summary_block(rec, log, final, code, script_end)) + "\n")
    why = f" ({rec.comment})" if rec.comment else ""
    sys.stderr.write(
        f"hpc-launch: job {record.job_id} {final.value}"
        + (f" with exit code {code}" if code is not None else "")
        + why
        + "\n"
    )
    return _exit_code(final, code)


def follow_chain(record: JobRecord, *, store: Optional[JobStore] = None, show_all: bool = False) -> int:
    """Follow a job, or every link of its chain from this one on: a link that stopped for time
    (exit 75, resumable) hands over to the next; any other end is the chain's end."""
    from .jobs import chain_links
    from .protocol import EXIT_RESUMABLE

    store = store or JobStore()
    links = [r for r in chain_links(store, record) if r.extra.get("link", 1) >= (record.extra or {}).get("link", 1)]
    code = 0
    for i, link in enumerate(links):
        if len(links) > 1:
            sys.stderr.write(
                f"hpc-launch: chain {link.extra['chain']}: link {link.extra['link']} "
                f"of {link.extra['links']} is job {link.job_id}\n"
            )
        code = follow_job(link, store=store, show_all=show_all)
        if code != EXIT_RESUMABLE:
            rest = links[i + 1 :]
            if rest and code == 0:
                sys.stderr.write(
                    f"hpc-launch: training finished in link {link.extra['link']}; the {len(rest)} later link(s) "
                    "find it complete and end at once\n"
                )
            return code
    return code


def follow_array(
    array: JobRecord, tasks: List[JobRecord], *, store: Optional[JobStore] = None, show_all: bool = False
) -> int:
    """Follow each task of a user's array (`-J`) in turn, each headed, then say how the array
    ended; returns the first failing task's exit code (0 when all succeeded)."""
    from .jobs import refresh

    store = store or JobStore()
    worst = 0
    for i, task in enumerate(tasks, 1):
        sys.stderr.write(f"hpc-launch: array {array.job_id}: task {i} of {len(tasks)} is job {task.job_id}\n")
        code = follow_job(task, store=store, show_all=show_all)
        if code == EXIT_SIGINT:
            return code
        worst = worst or code
    ended = refresh(store, [store.get(array.job_id, array.cluster)])[0]
    sys.stderr.write(
        f"hpc-launch: array {array.job_id} {ended.state}" + (f" ({ended.comment})\n" if ended.comment else "\n")
    )
    return worst


def summary_block(
    rec: JobRecord, log_text: str, state: JobState, code: Optional[int], script_end: Optional[float] = None
) -> str:
    """The end-of-job block; for a job that did not finish well, doctor's cause and fix too.
    `script_end`: when the job script ended, from its exit file (the cluster's clock)."""
    s = summarise(
        log_text,
        state=state.value,
        exit_code=code,
        log_path=rec.log_path,
        submit_time=rec.submit_time,
        end_time=rec.end_time,
        script_end=script_end,
    )
    if state in (JobState.FAILED, JobState.TIMEOUT):
        s.cause = diagnosis_lines(log_text, rec, code)
    text = format_summary(s, rec.job_id)
    hosts = host_lines(rec, log_text) + requeue_lines(log_text, state)
    if hosts:  # before the log's path, which stays the last line
        head, _, last = text.rpartition("\n")
        text = "\n".join([head, *hosts, last])
    return text


def host_lines(rec: JobRecord, log_text: str) -> List[str]:
    """Which hosts the job was kept off, trained on instead of its spares, found slow or bad, and
    what its pre-flight gate measured."""
    extra = rec.extra or {}
    lines = []
    if extra.get("excluded"):
        lines.append(f"  hosts     kept off {', '.join(extra['excluded'])} (found bad by earlier jobs, or --exclude)")
    spares = re.findall(r"^\[hpc-launch\] spares: (training on .*)$", log_text, re.M)
    if spares:  # the last: after a --failover swap, the nodes it ended on
        lines.append(f"  hosts     {spares[-1]}")
    for swap in re.findall("^" + re.escape(FAILOVER_PREFIX) + r"(.* swapped out for .*)$", log_text, re.M):
        lines.append(f"  failover  {swap}")
    gate = re.search(
        r"^\[hpc-launch\] preflight ok: (\d+ ranks? on \d+ hosts?): .*?; all-reduce (.*?); gate ([\d.]+ s)$",
        log_text,
        re.M,
    )
    if gate:
        lines.append(f"  preflight {gate.group(1)} as planned in {gate.group(3)}; all-reduce {gate.group(2)}")
    for m in re.finditer(r"^\[hpc-launch\] straggler: rank (\d+) on (\S+) is ([\d.]+x) slower", log_text, re.M):
        lines.append(
            f"  hosts     straggler: {m.group(2)} (rank {m.group(1)}, {m.group(3)} slower than the median rank)"
        )
    bad = extra.get("bad_hosts")  # what was remembered: a line in the log alone is no record
    if bad:
        lines.append(
            "  hosts     found bad: "
            + "; ".join(f"{h} ({why})" for h, why in bad.items())
            + ": later jobs avoid them (`hpc-launch hosts`)"
        )
    return lines


def requeue_lines(log_text: str, state: JobState) -> List[str]:
    """How often the scheduler ran the job again (a preemption, a node lost) and how its last run ended."""
    runs = [int(n) for n in re.findall(REQUEUED_RUN, log_text, re.M)]
    preempted = re.findall("^" + re.escape(PREEMPTED_PREFIX) + r"(\S+): (\w+) requeues", log_text, re.M)
    if not runs and not preempted:
        return []
    last = max(runs, default=1)
    why = "by the scheduler"
    if preempted:
        why = f"preempted at {', '.join(at for at, _ in preempted)} ({preempted[0][1]})"
    if last == 1:  # preempted, not started again yet
        return [f"  requeued  {why}: waiting to run again"]
    end = "ran to the end" if state == JobState.DONE else f"ended {state.value}"
    return [f"  requeued  {last - 1} time{'s' if last > 2 else ''}: {why}, run {last} {end}"]


def diagnosis_lines(log_text: str, rec: JobRecord, code: Optional[int]) -> List[str]:
    from .doctor import diagnose, summary_lines

    return summary_lines(diagnose(log_text, exit_code=code, comment=rec.comment, state=rec.state))


def summary_of(record: JobRecord, store: Optional[JobStore] = None) -> str:
    """`logs --summary`: the end-of-job block of a job as the scheduler reports it now."""
    from .jobs import refresh

    store = store or JobStore()
    text = read_whole_log(record)
    record = refresh(store, [record])[0]
    return summary_block(record, text, JobState(record.state), record.exit_code)
