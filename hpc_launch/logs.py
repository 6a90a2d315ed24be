"""Follow a job's log on the login node (here or over SSH).

Polling is split by cost: the log file is stat'ed every `poll_interval` (cheap, and what makes
new lines appear quickly), while the scheduler is asked for the job state at most every
1 s, backing off to 10 s while nothing changes, so following a job never hammers the controller.
"""

from __future__ import annotations

import codecs
import logging
import re
import threading
import time
from typing import Callable, Optional

from hpc_launch.errors import HpcLaunchError, TransportError
from hpc_launch.paths import NotAUserFile
from hpc_launch.protocol import (
    LIVE_LOG_SUFFIX,
    POLL,
    RECONNECT,
    RECONNECT_GIVE_UP_S,
    TRAINING_FINISHED,
    Backoff,
    parse_exit_file,
    parse_exit_time,
)
from hpc_launch.states import JobState
from hpc_launch.transport import Transport

log = logging.getLogger(__name__)

MAX_STATE_FAILURES = 5  # consecutive failed state queries tolerated (one bad qstat must not end a follow)
_CHUNK = 1 << 20
_LINE_MAX = 4096  # longer than any job line (the job id, host, time, script name)


# The job script's first line names its script (templates/body/prologue.sh.j2): a log that
# holds another script's line belongs to an earlier job with the same number.
JOB_LINE = re.compile(rb"^\[hpc-launch\] job .* script (\S+)$", re.M)


class LogTail:
    """Reads only what was appended to a file since the last call.

    With `script` (the job script's file name), lines of an earlier job that wrote to the same
    path (a job number reused in the same work dir, or a live log appended to) are skipped:
    reading starts at this job's own first line, and a file holding only another job's lines
    counts as not there yet.
    """

    def __init__(self, transport: Transport, path: str, script: Optional[str] = None):
        self.transport = transport
        self.path = path
        self.offset = 0
        self.exists = False
        self.script = script
        self._confirmed = script is None
        self._stale_size: Optional[int] = None
        self._scanned = 0  # a live log: where the search for this job's line goes on
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def _find_start(self, size: int) -> Optional[int]:
        """Where this job's lines start, or None while the file holds only an earlier job's."""
        if size == self._stale_size:
            return None
        if self.path.endswith(LIVE_LOG_SUFFIX):
            return self._find_own_line(size)
        head = self.transport.read_from(self.path, 0, min(size, _CHUNK))
        start, stale = 0, False
        for m in JOB_LINE.finditer(head):
            if m.group(1).decode("utf-8", "replace") == self.script:
                return m.start() if stale else start
            stale = True
        if stale:
            self._stale_size = size
            return None
        return 0

    def _find_own_line(self, size: int) -> Optional[int]:
        """A live log (the job's tee, appended to: `tee -a`) holds only what jobs wrote after their
        job line, so nothing before this job's own line is this job's: an earlier job with the same
        name and number left the rest (whole, or cut mid-line, or without a job line at all, from an
        older hpc-launch). The search reads on from where it stopped, so a long file is read once."""
        own = re.compile(rb"\[hpc-launch\] job [^\n]* script " + re.escape((self.script or "").encode()) + rb"$", re.M)
        while self._scanned < size:
            chunk = self.transport.read_from(self.path, self._scanned, _CHUNK)
            at_end = not chunk or self._scanned + len(chunk) >= size
            m = own.search(chunk)
            if m and (m.end() < len(chunk) or at_end):
                return self._scanned + m.start()
            # the line may straddle two reads (or be written on): look again from a line's length back
            if at_end:
                self._scanned = max(self._scanned, size - _LINE_MAX)
                break
            self._scanned += len(chunk) - _LINE_MAX
        self._stale_size = size
        return None

    def read_new(self) -> str:
        size = self.transport.size(self.path)
        if size is None:
            return ""
        if not self._confirmed:
            try:
                start = self._find_start(size)
            except FileNotFoundError:
                return ""
            if start is None:
                return ""
            self._confirmed, self.offset = True, start
        self.exists = True
        if size < self.offset:  # truncated or replaced: start over
            log.debug("%s shrank from %d to %d bytes; reading from the start", self.path, self.offset, size)
            self.offset = 0
            self._decoder.reset()
        parts = []
        while self.offset < size:
            try:
                data = self.transport.read_from(self.path, self.offset, _CHUNK)
            except FileNotFoundError:  # removed between stat and read
                break
            if not data:
                break
            self.offset += len(data)
            # The incremental decoder keeps an incomplete multibyte character for the next call.
            parts.append(self._decoder.decode(data))
        return "".join(parts)


def follow(
    transport: Transport,
    path: str,
    *,
    state: Callable[[], JobState],
    write: Callable[[str], None],
    on_wait: Optional[Callable[[float], None]] = None,
    poll_interval: float = 0.2,
    stop: Optional[threading.Event] = None,
    script: Optional[str] = None,
    on_reconnect: Optional[Callable[[str, float], None]] = None,
    poll: Backoff = POLL,
    reconnect: Backoff = RECONNECT,
    give_up_s: float = RECONNECT_GIVE_UP_S,
    ended: Optional[Callable[[], bool]] = None,
) -> JobState:
    """Stream the log to `write` until the job ends and the log is drained; return the final state.

    `ended()`, asked every `poll.first` seconds, is a cheap sign that the job script has ended (its
    exit-code file): the scheduler is then asked at once and every `poll.first` seconds, instead of
    at the backed-off pace (up to `poll.most` seconds late) that spares it while the job runs.

    `on_wait(seconds)` is called on every poll while the log does not exist yet (job queued).
    `on_reconnect(reason, delay)` is called when the connection dropped and is retried.
    If `stop` is set, returns the last state seen (UNKNOWN if none).
    `poll` paces the state queries, `reconnect` the retries of a dropped connection (protocol.py).
    """
    stop = stop or threading.Event()
    tail = LogTail(transport, path, script)
    pace = _Pace(poll, ended, poll_interval)
    reconnects = _Reconnects(reconnect, give_up_s, on_reconnect, stop)
    while not stop.is_set():
        try:
            text = tail.read_new()
        except TransportError as exc:
            if not reconnects.retry(exc):
                raise
            continue
        reconnects.back()
        if text:
            write(text)
            pace.saw(text)
        elif not tail.exists and on_wait is not None:
            on_wait(time.monotonic() - pace.started)
        now = time.monotonic()
        pace.check_end(now)
        if now >= pace.next_query:
            current = pace.ask(now, state)
            if current.terminal:
                _drain(tail, write, poll_interval)
                return current
        stop.wait(poll_interval)
    return pace.last_state


class _Reconnects:
    """A log read that failed for the connection: tried again at `reconnect`'s pace (backing off
    from the second drop) until the connection has been lost for `give_up_s`."""

    def __init__(
        self,
        reconnect: Backoff,
        give_up_s: float,
        on_reconnect: Optional[Callable[[str, float], None]],
        stop: threading.Event,
    ) -> None:
        self.reconnect, self.give_up_s, self.on_reconnect, self.stop = reconnect, give_up_s, on_reconnect, stop
        self.lost_since: Optional[float] = None
        self.drops = 0
        self.delay = reconnect.first

    def retry(self, exc: TransportError) -> bool:
        """Wait before the next try; False once it is time to give up (the caller raises)."""
        now = time.monotonic()
        self.lost_since = self.lost_since or now
        if now - self.lost_since >= self.give_up_s:
            return False
        self.delay = self.reconnect.first if not self.drops else self.reconnect.after(self.delay)
        self.drops += 1
        if self.on_reconnect is not None:
            self.on_reconnect(exc.message, self.delay)
        log.debug("log read failed (%s, attempt %d); retrying in %.0f s", exc, self.drops, self.delay)
        self.stop.wait(self.delay)
        return True

    def back(self) -> None:
        self.lost_since, self.drops = None, 0


class _Pace:
    """When the scheduler is asked for the job's state: at once, then backing off while nothing
    changes; every `poll.first` seconds once `ended()` (its exit-code file) says the script ended.
    Once the training's last line is in, that end is watched for at the log's pace: what is left
    (eval, ranks and launcher exiting) takes seconds, and noticing it a second late is a third of
    that (the main job's summary, docs/launch-cost.md)."""

    def __init__(self, poll: Backoff, ended: Optional[Callable[[], bool]], poll_interval: float) -> None:
        self.poll, self.ended, self.poll_interval = poll, ended, poll_interval
        self.started = time.monotonic()
        self.last_state = JobState.UNKNOWN
        self.interval = poll.first
        self.next_query = self.started  # ask once at the start: the job may be long finished
        self.failures = 0
        self.next_end_check, self.end_seen = self.started, False
        self.near_end, self.tail_text = False, ""

    def saw(self, text: str) -> None:
        if not self.near_end:
            self.tail_text = (self.tail_text + text)[-4096:]  # the marker may straddle two reads
            self.near_end = TRAINING_FINISHED in self.tail_text
            if self.near_end:
                self.next_end_check = time.monotonic()

    def check_end(self, now: float) -> None:
        if self.ended is None or self.end_seen or now < self.next_end_check:
            return
        self.next_end_check = now + (self.poll_interval if self.near_end else self.poll.first)
        try:
            self.end_seen = self.ended()
        except (TransportError, OSError):
            self.end_seen = False  # the state query below says what is true
        if self.end_seen:
            self.next_query = now

    def ask(self, now: float, state: Callable[[], JobState]) -> JobState:
        """The job's state now; a failed query counts (MAX_STATE_FAILURES in a row, or one that
        is final, ends the follow) and keeps the last state seen."""
        try:
            current = state()
            self.failures = 0
        except HpcLaunchError as exc:
            self.failures += 1
            if self.failures >= MAX_STATE_FAILURES or getattr(exc, "final", False):
                raise
            log.warning("job state query failed (%s); will retry", exc)
            current = self.last_state
        if current.terminal:
            return current
        changed = current != self.last_state
        self.interval = self.poll.first if self.end_seen else self.poll.after(self.interval, changed=changed)
        self.last_state = current
        self.next_query = now + self.interval
        return current


def _drain(tail: LogTail, write: Callable[[str], None], poll_interval: float) -> None:
    """Read until the file stops growing: the last lines may land just after the job ended."""
    quiet_reads = 0
    while quiet_reads < 2:
        text = tail.read_new()
        if text:
            write(text)
            quiet_reads = 0
        else:
            quiet_reads += 1
            if quiet_reads < 2:
                time.sleep(poll_interval)


def read_exit_time(transport: Transport, exit_path: str) -> Optional[float]:
    """When the job script ended, as its exit file says (the cluster's clock); None if it does not."""
    try:
        data = transport.read_from(exit_path, 0, 512)
    except (FileNotFoundError, NotAUserFile, TransportError):
        return None
    return parse_exit_time(data.decode("utf-8", errors="replace"))


def read_exit_code(transport: Transport, exit_path: str, script: Optional[str] = None) -> Optional[int]:
    """The exit code the job script wrote beside its log (`CODE SCRIPT`); None if absent, empty,
    garbage, or written by another script (an earlier job with the same number)."""
    try:
        data = transport.read_from(exit_path, 0, 512)
    except (FileNotFoundError, NotAUserFile):  # a FIFO or a device there is not an exit code
        return None
    return parse_exit_file(data.decode("utf-8", errors="replace"), script)
