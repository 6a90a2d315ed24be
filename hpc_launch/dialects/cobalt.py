"""Cobalt (ThetaGPU, retired). No Cobalt exists anywhere installable: the parsers are tested against
outputs quoted in ALCF's documentation, not a live scheduler (see docs/verification.md)."""

from __future__ import annotations

from typing import Dict, Iterable, List, Sequence

from ..states import JobState
from .base import Dialect, StatusInfo, last_matching_line

_STATE = {
    "queued": JobState.QUEUED, "user_hold": JobState.QUEUED, "admin_hold": JobState.QUEUED,
    "dep_hold": JobState.QUEUED, "maxrun_hold": JobState.QUEUED, "starting": JobState.RUNNING,
    "running": JobState.RUNNING, "exiting": JobState.RUNNING, "killing": JobState.RUNNING,
    "dep_fail": JobState.FAILED,
}
QSTAT_HEADER = "JobID:State"


class Cobalt(Dialect):
    name = "cobalt"
    directive_prefix = "#COBALT"
    submit_program = "qsub"
    job_id_expr = "${COBALT_JOBID:?not inside a Cobalt job}"
    job_num_expr = "${COBALT_JOBID}"
    nodelist_shell = 'awk \'!seen[$0]++\' "$COBALT_NODEFILE"'

    def submit_argv(self, script_path, *, submit_flags=(), program=None, log_prefix=""):
        # Script mode; Cobalt also requires the execute bit (the submitter sets mode 0755).
        return list(program or [self.submit_program]) + ["--mode", "script"] + list(submit_flags) + [script_path]

    def parse_submit(self, out: str) -> str:
        return last_matching_line(out, r"^(\d+)$", "qsub").group(1)

    def status_argv(self, job_ids: Sequence[str], *, history: bool = True) -> List[str]:
        # QSTAT_HEADER picks the columns; `env` keeps the argv free of shell syntax.
        return ["env", f"QSTAT_HEADER={QSTAT_HEADER}", "qstat"] + list(job_ids)

    def parse_status(self, out: str, job_ids: Iterable[str]) -> Dict[str, StatusInfo]:
        wanted = set(job_ids)
        result: Dict[str, StatusInfo] = {}
        for line in out.splitlines():
            cols = line.split()
            if len(cols) >= 2 and cols[0] in wanted:
                word = cols[1].lower()
                result[cols[0]] = StatusInfo(_STATE.get(word, JobState.UNKNOWN), None, cols[1])
        return result

    def cancel_argv(self, job_id: str) -> List[str]:
        return ["qdel", job_id]
