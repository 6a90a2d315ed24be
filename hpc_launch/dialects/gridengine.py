"""Grid Engine (ABCI 2.0: Altair Grid Engine; the testbed: Son of Grid Engine 8.1.9)."""

from __future__ import annotations

import re
from typing import Dict, Iterable, List, Sequence

from ..states import JobState
from .base import Dialect, StatusInfo, last_matching_line


def _state(code: str) -> JobState:
    if "E" in code:
        return JobState.FAILED  # Eqw: the job errored and waits for an admin
    if "d" in code:
        return JobState.RUNNING  # being deleted: resolves to cancelled once gone
    if code.endswith("qw") or "h" in code:
        return JobState.QUEUED
    if code and code[-1] in "rtR" or "s" in code.lower():
        return JobState.RUNNING
    return JobState.UNKNOWN


class GridEngine(Dialect):
    name = "gridengine"
    directive_prefix = "#$"
    submit_program = "qsub"
    job_id_expr = "${JOB_ID:?not inside a Grid Engine job}"
    job_num_expr = "${JOB_ID}"
    nodelist_shell = 'if [ -n "${SGE_JOB_HOSTLIST:-}" ]; then cat "$SGE_JOB_HOSTLIST"; else awk \'{print $1}\' "$PE_HOSTFILE"; fi | awk \'!seen[$0]++\''

    def parse_submit(self, out: str) -> str:
        # `Your job 42 ("name") has been submitted`, `Your job-array 42.1-4:1 (...)`, or -terse `42`.
        m = last_matching_line(out, r"^(?:Your job(?:-array)? (\d+)[.\s]|(\d+)(?:\.\S+)?$)", "qsub")
        return m.group(1) or m.group(2)

    def status_argv(self, job_ids: Sequence[str], *, history: bool = True) -> List[str]:
        # One query for all jobs: plain qstat lists the user's pending and running jobs.
        return ["qstat"]

    def parse_status(self, out: str, job_ids: Iterable[str]) -> Dict[str, StatusInfo]:
        wanted = set(job_ids)
        result: Dict[str, StatusInfo] = {}
        for line in out.splitlines():
            cols = line.split()
            if len(cols) >= 5 and cols[0] in wanted and re.fullmatch(r"\d+", cols[0]):
                result[cols[0]] = StatusInfo(_state(cols[4]), None, cols[4])
        return result

    def cancel_argv(self, job_id: str) -> List[str]:
        return ["qdel", job_id]

    @staticmethod
    def accounting_argv(job_id: str) -> List[str]:
        return ["qacct", "-j", job_id]

    @staticmethod
    def parse_accounting(out: str) -> StatusInfo:
        fields = dict(re.findall(r"(?m)^(\w+)\s+(.*?)\s*$", out))
        raw_exit = (fields.get("exit_status") or "").split()  # `137   (Killed)`
        exit_code = int(raw_exit[0]) if raw_exit and raw_exit[0].lstrip("-").isdigit() else None
        failed = fields.get("failed", "0").split()[0]
        if exit_code == 0 and failed == "0":
            return StatusInfo(JobState.DONE, 0, "qacct")
        if exit_code in (137, 143) and failed != "0":
            # killed by a signal: qdel, or the h_rt limit (failed 37 / "qmaster enforced h_rt limit")
            if "h_rt" in fields.get("failed", "") or failed == "37":
                return StatusInfo(JobState.TIMEOUT, exit_code, "qacct")
            return StatusInfo(JobState.CANCELLED, exit_code, "qacct")
        return StatusInfo(JobState.FAILED, exit_code, "qacct")
