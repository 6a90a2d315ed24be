"""Slurm (any Slurm cluster; the testbed runs a real Slurm 22.05)."""

from __future__ import annotations

from typing import Dict, Iterable, List, Sequence

from ..states import JobState
from .base import Dialect, StatusInfo, last_matching_line

_STATE = {
    "PENDING": JobState.QUEUED, "CONFIGURING": JobState.QUEUED, "REQUEUED": JobState.QUEUED,
    "REQUEUE_HOLD": JobState.QUEUED, "REQUEUE_FED": JobState.QUEUED, "RESV_DEL_HOLD": JobState.QUEUED,
    "SUSPENDED": JobState.QUEUED, "STOPPED": JobState.QUEUED,
    # Preempted jobs usually come back (requeue): not an end. If they never do, the exit file decides.
    "PREEMPTED": JobState.QUEUED,
    "RUNNING": JobState.RUNNING, "COMPLETING": JobState.RUNNING, "SIGNALING": JobState.RUNNING,
    "STAGE_OUT": JobState.RUNNING, "RESIZING": JobState.RUNNING,
    "COMPLETED": JobState.DONE,
    "FAILED": JobState.FAILED, "NODE_FAIL": JobState.FAILED, "BOOT_FAIL": JobState.FAILED,
    "OUT_OF_MEMORY": JobState.FAILED, "DEADLINE": JobState.FAILED, "SPECIAL_EXIT": JobState.FAILED,
    "REVOKED": JobState.CANCELLED, "CANCELLED": JobState.CANCELLED,
    "TIMEOUT": JobState.TIMEOUT,
}
SQUEUE_FORMAT = "%i|%T|%r"


class Slurm(Dialect):
    name = "slurm"
    directive_prefix = "#SBATCH"
    submit_program = "sbatch"
    job_id_expr = "${SLURM_JOB_ID:?not inside a Slurm job}"
    job_num_expr = "${SLURM_JOB_ID}"
    nodelist_shell = 'scontrol show hostnames "$SLURM_JOB_NODELIST"'

    def submit_argv(self, script_path, *, submit_flags=(), program=None, log_prefix=""):
        return list(program or [self.submit_program]) + ["--parsable"] + list(submit_flags) + [script_path]

    def parse_submit(self, out: str) -> str:
        # --parsable: `12345` or `12345;cluster`; plain sbatch: `Submitted batch job 12345`.
        m = last_matching_line(out, r"^(?:Submitted batch job )?(\d+)(?:;\S+)?$", "sbatch")
        return m.group(1)

    def status_argv(self, job_ids: Sequence[str], *, history: bool = True) -> List[str]:
        # One query for every tracked job; --states=all keeps finished jobs until MinJobAge.
        return ["squeue", "--noheader", "--states=all", f"--format={SQUEUE_FORMAT}", "--jobs=" + ",".join(job_ids)]

    def parse_status(self, out: str, job_ids: Iterable[str]) -> Dict[str, StatusInfo]:
        wanted = set(job_ids)
        result: Dict[str, StatusInfo] = {}
        for line in out.splitlines():
            parts = line.strip().split("|")
            if len(parts) < 2:
                continue
            job, word = parts[0], parts[1].split()[0] if parts[1].strip() else ""
            if job in wanted:
                state = _STATE.get(word.rstrip("+"), JobState.UNKNOWN)
                result[job] = StatusInfo(state, None, word)
        return result

    def cancel_argv(self, job_id: str) -> List[str]:
        return ["scancel", job_id]

    def find_submitted(self, run, script_relpath: str):
        # %o is the batch script as sbatch was given it; ours carries a unique time stamp
        result = run(["squeue", "--me", "--noheader", "--states=all", "--format=%i|%o"])
        for line in result.out.splitlines():
            job, _, command = line.strip().partition("|")
            if job.isdigit() and (command == script_relpath or command.endswith("/" + script_relpath)):
                return job
        return None
