"""Slurm's words read into ours: its job state codes (long and compact form, sacct's `CANCELLED by
UID` and `+`), its reason codes in plain words, the times and exit statuses it prints
(squeue(1) JOB STATE CODES and JOB REASON CODES, sacct(1))."""

from __future__ import annotations

import re
import time
from typing import Dict, List, Optional, Tuple

from ..states import JobState
from .answers import StatusInfo

# long form: (compact form, state, what to tell the user when the word alone does not)
_CODES: Dict[str, Tuple[str, JobState, str]] = {
    "PENDING": ("PD", JobState.QUEUED, ""),
    "CONFIGURING": ("CF", JobState.QUEUED, "nodes allocated, booting or being configured"),
    "REQUEUED": ("RQ", JobState.QUEUED, "requeued"),
    "REQUEUE_HOLD": ("RH", JobState.QUEUED, "requeued and held"),
    "REQUEUE_FED": ("RF", JobState.QUEUED, "requeued by the federation"),
    "RESV_DEL_HOLD": ("RD", JobState.QUEUED, "held: its reservation was deleted"),
    # held after a requeue in a special state: it runs again only once released
    "SPECIAL_EXIT": (
        "SE",
        JobState.QUEUED,
        "requeued in SPECIAL_EXIT state and held (`scontrol release` lets it run again)",
    ),
    "SUSPENDED": ("S", JobState.QUEUED, "suspended"),
    "STOPPED": ("ST", JobState.QUEUED, "stopped (SIGSTOP), resources kept"),
    # Terminated by preemption: Slurm requeues it if the partition says so, else it has ended.
    # Not an end here: once squeue forgets the job, the exit-code file decides.
    "PREEMPTED": ("PR", JobState.QUEUED, "preempted: requeued if the partition allows it, else it has ended"),
    # A federation sibling removed because another cluster started the job: it runs there.
    "REVOKED": ("RV", JobState.QUEUED, "runs on another cluster of the federation"),
    "RUNNING": ("R", JobState.RUNNING, ""),
    "COMPLETING": ("CG", JobState.RUNNING, ""),
    "SIGNALING": ("SI", JobState.RUNNING, ""),
    "STAGE_OUT": ("SO", JobState.RUNNING, "staging out files"),
    "RESIZING": ("RS", JobState.RUNNING, ""),
    "COMPLETED": ("CD", JobState.DONE, ""),
    "FAILED": ("F", JobState.FAILED, ""),
    "NODE_FAIL": ("NF", JobState.FAILED, "a node of the job failed (NODE_FAIL)"),
    "BOOT_FAIL": ("BF", JobState.FAILED, "its nodes failed to boot (BOOT_FAIL)"),
    "OUT_OF_MEMORY": ("OOM", JobState.FAILED, "out of memory (Slurm: OUT_OF_MEMORY)"),
    "DEADLINE": ("DL", JobState.TIMEOUT, "terminated at its --deadline (DEADLINE)"),
    "CANCELLED": ("CA", JobState.CANCELLED, ""),
    "TIMEOUT": ("TO", JobState.TIMEOUT, ""),
}
_WORD: Dict[str, Tuple[JobState, str, str]] = {}  # either form -> (state, long form, note)
for _long, (_short, _state, _note) in _CODES.items():
    _WORD[_long] = _WORD[_short] = (_state, _long, _note)

# Reasons that say the job will never start as submitted (squeue(1) JOB REASON CODES; the
# *Max*PerJob* limits: "a portion of the job request exceeds a maximum limit", job_reason_codes).
_NEVER_RUNS = re.compile(r"^(DependencyNeverSatisfied|(Assoc|QOS)Max\w*PerJob\w*)$")
# Reasons that repeat what the state already says.
_QUIET_REASONS = {"", "None", "NonZeroExitCode", "TimeLimit"}

# Why a pending job waits, in plain words: squeue(1) "JOB REASON CODES" and
# https://slurm.schedmd.com/job_reason_codes.html (the common ones; any other code is shown as it is).
REASON_WORDS: Dict[str, str] = {
    "Priority": "waiting for higher-priority jobs",
    "Resources": "waiting for nodes",
    "Dependency": "waiting for the job it depends on to end",
    "DependencyNeverSatisfied": "the job it depends on ended in a way that never satisfies it",
    "BeginTime": "its --begin time has not come (a requeued job: Slurm's pause before it runs again)",
    "JobHeldUser": "held by its owner (`scontrol release ID` lets it run)",
    "JobHeldAdmin": "held by an administrator",
    "ReqNodeNotAvail": "a node it needs is down, drained or reserved",
    "NodeDown": "a node it needs is down",
    "PartitionDown": "its partition is down",
    "PartitionInactive": "its partition is inactive",
    "PartitionNodeLimit": "it asks for more nodes than its partition allows",
    "PartitionTimeLimit": "it asks for more time than its partition allows",
    "Reservation": "waiting for its reservation to start",
    "Licenses": "waiting for licenses",
    "BadConstraints": "no node matches its constraints",
    "InvalidAccount": "its account is not valid",
    "InvalidQOS": "its QOS is not valid",
}
# Families of limits (AssocGrpGRES, QOSMaxJobsPerUserLimit, ...), tried in order.
_REASON_FAMILIES = (
    (r"QOSMax\w*PerUser", "the QOS's per-user limit is reached: it starts when your other jobs end"),
    (r"QOSMax\w*PerAccount|MaxJobsPerAccount", "the QOS's per-account limit is reached"),
    (r"AssocGrp", "your account's (association's) group limit is reached: it starts when its jobs free it"),
    (r"AssocMax\w*PerJob", "it exceeds your account's per-job limit"),
    (r"QOSGrp", "the QOS's group limit is reached: it starts when its jobs free it"),
    (r"QOSMax\w*PerJob", "it exceeds the QOS's per-job limit"),
    (r"AssocMax|QOSMax", "a limit of your account or QOS is reached"),
)


def reason_words(code: str) -> str:
    """A Slurm reason code -> `Code: plain words` (the code alone when it has none). squeue
    writes some with details (`ReqNodeNotAvail, UnavailableNodes:pod1`): the code is the head."""
    code = code.strip()
    head = re.split(r"[,\s]", code, maxsplit=1)[0]
    words = REASON_WORDS.get(head) or next((w for p, w in _REASON_FAMILIES if re.match(p, head)), "")
    return f"{code}: {words}" if words and code not in _QUIET_REASONS else code


SQUEUE_FORMAT = "%i|%T|%r"
SACCT_FORMAT = "JobID,State,ExitCode"


def state_of(word: str, reason: str = "") -> StatusInfo:
    """A Slurm state word (long or compact, sacct's `CANCELLED by 0` and `CANCELLED+` too) and
    its reason -> StatusInfo. A word Slurm does not document is UNKNOWN: it never ends a job."""
    raw = word.split()[0].rstrip("+") if word.strip() else ""
    state, long_word, note = _WORD.get(raw.upper(), (JobState.UNKNOWN, raw, ""))
    reason = reason.strip()
    never = state == JobState.QUEUED and bool(_NEVER_RUNS.match(reason))
    comment = note
    if reason not in _QUIET_REASONS:
        comment = f"{comment} ({reason})" if comment else reason
        if never:
            comment += ": it will not start as submitted"
    elif long_word == "CANCELLED" and " by " in word:
        comment = f"cancelled by uid {word.split(' by ', 1)[1].strip()}"
    return StatusInfo(state, None, raw, comment=comment, never_runs=never)


def _array_members(job: str) -> List[str]:
    """squeue's `%i` of an array's pending tasks, `12_[0-1,4]` (`%2` at the end: a throttle),
    -> [12_0, 12_1, 12_4]; any other id as it is."""
    m = re.fullmatch(r"(\d+)_\[([\d,\-]+)(?:%\d+)?\]", job)
    if not m:
        return [job]
    out = []
    for part in m.group(2).split(","):
        first, _, last = part.partition("-")
        if first.isdigit() and (not last or last.isdigit()):
            out += [f"{m.group(1)}_{i}" for i in range(int(first), int(last or first) + 1)]
    return out


def slurm_time(text: str) -> Optional[float]:
    """A time as Slurm prints it: epoch seconds under SLURM_TIME_FORMAT=%s, else its default
    `2026-11-26T03:00:39` (this machine's local time, no zone); None for `N/A` and the like."""
    text = text.strip()
    if text.isdigit():
        # beyond the year 9999 no clock can show it (and `status` would fail formatting it)
        return float(text) if len(text) <= 12 and int(text) <= _LAST_SECOND else None
    if re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", text):
        try:  # the right shape is not yet a date: `2026-13-45T99:99:99` is no estimate, not a traceback
            return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))
        except (ValueError, OverflowError):
            return None
    return None


_LAST_SECOND = 253402300799  # 9999-12-31T23:59:59Z


def exit_status(value: str) -> Optional[int]:
    """sacct's ExitCode `code:signal` -> one number: the code, or 128 + signal when a signal
    ended it (as a shell reports it: 0:9 -> 137)."""
    m = re.fullmatch(r"\s*(\d+):(\d+)\s*", value or "")
    if not m:
        return None
    code, sig = int(m.group(1)), int(m.group(2))
    return 128 + sig if sig and not code else code
