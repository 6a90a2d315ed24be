"""PBS Professional (ABCI 3.0, Miyabi, Polaris). Also drives Slurm's Torque/PBS wrappers (the testbed)."""

from __future__ import annotations

import re
from typing import Dict, Iterable, List, Sequence

from ..states import JobState
from .base import Dialect, StatusInfo, last_matching_line

_STATE = {
    "Q": JobState.QUEUED, "H": JobState.QUEUED, "W": JobState.QUEUED, "T": JobState.QUEUED,
    "S": JobState.QUEUED, "U": JobState.QUEUED, "B": JobState.RUNNING,
    "R": JobState.RUNNING, "E": JobState.RUNNING, "X": JobState.DONE,
    # F (finished, real PBS Pro with -x) and C (completed, Torque/Slurm wrapper) resolve by exit status.
}
# PBS Pro exit status conventions: >256 means killed by signal (256 + n); -29 = walltime kill.
_WALLTIME_EXIT = {-29, -11}


def finished_state(exit_status: int | None) -> JobState:
    if exit_status is None:
        return JobState.UNKNOWN
    if exit_status == 0:
        return JobState.DONE
    if exit_status in _WALLTIME_EXIT:
        return JobState.TIMEOUT
    if exit_status in (271, 143, 265, 137):  # SIGTERM / SIGKILL from qdel
        return JobState.CANCELLED
    return JobState.FAILED


class PBSPro(Dialect):
    name = "pbspro"
    directive_prefix = "#PBS"
    submit_program = "qsub"
    job_id_expr = "${PBS_JOBID:?not inside a PBS job}"
    job_num_expr = "${PBS_JOBID%%.*}"
    nodelist_shell = 'awk \'!seen[$0]++\' "$PBS_NODEFILE"'
    status_needs_history_fallback = True

    def parse_submit(self, out: str) -> str:
        # Real PBS Pro prints `1234.pbs1`; Slurm's qsub wrapper prints a bare `1234`.
        return last_matching_line(out, r"^(\d+(?:\.[\w.-]+)?)$", "qsub").group(1)

    def status_argv(self, job_ids: Sequence[str], *, history: bool = True) -> List[str]:
        # -x adds finished jobs (PBS Pro); Torque-style wrappers reject it, tracker retries without.
        return ["qstat", "-f"] + (["-x"] if history else []) + list(job_ids)

    def parse_status(self, out: str, job_ids: Iterable[str]) -> Dict[str, StatusInfo]:
        wanted = {self.job_num(j): j for j in job_ids}
        result: Dict[str, StatusInfo] = {}
        for block in re.split(r"(?m)^(?=Job Id:)", out):
            m = re.match(r"Job Id:\s*(\S+)", block)
            if not m:
                continue
            num = self.job_num(m.group(1))
            if num not in wanted:
                continue
            attrs = dict(re.findall(r"(?m)^\s+([\w.]+)\s*=\s*(.*)$", block))
            letter = attrs.get("job_state", "").strip()
            exit_raw = attrs.get("Exit_status", attrs.get("exit_status"))
            exit_code = int(exit_raw) if exit_raw and re.fullmatch(r"-?\d+", exit_raw.strip()) else None
            if letter in ("F", "C"):
                result[wanted[num]] = StatusInfo(finished_state(exit_code), exit_code, letter, ended=True)
            else:
                result[wanted[num]] = StatusInfo(_STATE.get(letter, JobState.UNKNOWN), exit_code, letter)
        return result

    def cancel_argv(self, job_id: str) -> List[str]:
        return ["qdel", job_id]
