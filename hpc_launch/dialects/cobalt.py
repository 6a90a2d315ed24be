"""Cobalt (ThetaGPU, retired). No Cobalt exists anywhere installable: the parsers are tested against
outputs quoted in ALCF's documentation, not a live scheduler (see docs/verification.md)."""

from __future__ import annotations

import re
from typing import Dict, Iterable, List, Sequence

from ..states import JobState
from .base import Dialect, StatusInfo, last_matching_line

# Every word Cobalt's qstat prints for a job: the queue manager's Job.__get_job_state turns its
# state machine into exactly these (src/lib/Components/cqm.py, ALCF's Cobalt; mirrored at
# github.com/ido/cobalt). Nothing else: no `errored` or `failed` (a job that failed is `exiting`,
# then `done`, then gone), so any other word stays UNKNOWN and never ends a job.
_STATE = {
    "queued": (JobState.QUEUED, ""),  # Ready
    "user_hold": (JobState.QUEUED, "held by its user (qhold)"),
    "admin_hold": (JobState.QUEUED, "held by an administrator"),
    "dep_hold": (JobState.QUEUED, "waiting for the job it depends on"),
    "maxrun_hold": (JobState.QUEUED, "held: the queue's running-job limit for this user"),
    "preempted": (JobState.QUEUED, "preempted: waits to run again"),  # runnable again
    "starting": (JobState.RUNNING, ""),  # prologues
    "running": (JobState.RUNNING, ""),
    "preempting": (JobState.RUNNING, "being preempted"),
    "exiting": (JobState.RUNNING, ""),  # epilogues, after the job's script ended
    "killing": (JobState.RUNNING, "being killed"),  # ends once gone; the exit-code file says how
}
# The job it depends on failed: it stays queued and never runs, until deleted.
_NEVER = {"dep_fail": "the job it depends on failed (dep_fail)"}
# Terminal: over, without saying how (Cobalt's qstat has no exit status): the exit-code file decides.
_OVER = {"done"}
QSTAT_HEADER = "JobID:State"


def state_of(word: str) -> StatusInfo:
    low = word.lower()
    if low in _NEVER:
        return StatusInfo(JobState.QUEUED, None, word, comment=_NEVER[low], never_runs=True)
    if low in _OVER:
        return StatusInfo(JobState.UNKNOWN, None, word, ended=True)
    state, comment = _STATE.get(low, (JobState.UNKNOWN, ""))  # unknown: never ends a job
    return StatusInfo(state, None, word, comment=comment)


class Cobalt(Dialect):
    name = "cobalt"
    title = "Cobalt"
    directive_prefix = "#COBALT"
    submit_program = "qsub"
    job_id_expr = "${COBALT_JOBID:?not inside a Cobalt job}"
    job_num_expr = "${COBALT_JOBID}"
    nodelist_shell = "awk '!seen[$0]++' \"$COBALT_NODEFILE\""
    nodefile_vars = ("COBALT_NODEFILE",)

    keyed_flags = ("--attrs",)

    def base_submit_flags(self) -> List[str]:
        # Script mode; Cobalt also requires the execute bit (the submitter sets mode 0755).
        return ["--mode", "script"]

    def parse_submit(self, out: str) -> str:
        return last_matching_line(out, r"^(\d+)$", "qsub").group(1)

    def status_argv(self, job_ids: Sequence[str]) -> List[str]:
        # QSTAT_HEADER picks the columns; `env` keeps the argv free of shell syntax.
        return ["env", f"QSTAT_HEADER={QSTAT_HEADER}", "qstat"] + list(job_ids)

    def parse_status(self, out: str, job_ids: Iterable[str]) -> Dict[str, StatusInfo]:
        """The QSTAT_HEADER table (ours), or the long form `qstat -l` prints (`JobID: 1` then
        `State: running` lines, what psij-python asks for)."""
        wanted = set(job_ids)
        result: Dict[str, StatusInfo] = {}
        job = None
        for line in out.splitlines():
            long_form = re.match(r"\s*(JobID|State)\s*:\s*(\S+)", line, re.I)
            if long_form:
                if long_form.group(1).lower() == "jobid":
                    job = long_form.group(2)
                elif job in wanted:
                    result[job] = state_of(long_form.group(2))
                continue
            cols = line.split()
            if len(cols) >= 2 and cols[0] in wanted:
                result[cols[0]] = state_of(cols[1])
        return result

    def cancel_argv(self, job_id: str) -> List[str]:
        return ["qdel", job_id]

    def depend_flags(self, job_id: str) -> List[str]:
        return ["--dependencies", job_id]
