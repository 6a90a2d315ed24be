"""No scheduler (`local`, SSH pods): the job script runs in the background in its own session.

The job id is the process id of the job's session leader; the log is NAME.o<pid> in the work
dir, and the exit-code file the script writes on exit tells how it ended.
"""

from __future__ import annotations

import re
from typing import Dict, Iterable, List, Sequence

from ..states import JobState
from .base import Dialect, StatusInfo, last_matching_line

# $1 = log name prefix (NAME.o), $2 = script. setsid makes the job its own session and process
# group (pid == pgid == sid), so cancel can signal the whole tree. `echo $$` hands back the id
# before stdout is redirected to the log.
_LAUNCH = (
    'setsid bash -c \'echo "$$"; exec >"$1$$" 2>&1 </dev/null; '
    'HPC_LAUNCH_JOB_ID=$$ exec bash "$2"\' hpc-launch-job "$1" "$2" &'
)
MARKER = "/.hpc-launch/"  # every script we start lives under WORKDIR/.hpc-launch/


class Direct(Dialect):
    name = "none"
    directive_prefix = ""
    submit_program = "bash"
    job_id_expr = "${HPC_LAUNCH_JOB_ID:-$$}"
    job_num_expr = "${HPC_LAUNCH_JOB_ID:-$$}"
    nodelist_shell = ""

    def submit_argv(self, script_path, *, submit_flags=(), program=None, log_prefix: str = "job.o"):
        return ["bash", "-c", _LAUNCH, "hpc-launch-submit", log_prefix, script_path]

    def parse_submit(self, out: str) -> str:
        return last_matching_line(out, r"^(\d+)$", "launch").group(1)

    def status_argv(self, job_ids: Sequence[str], *, history: bool = True) -> List[str]:
        # `ps` exits 1 when none is alive; that is an answer, not an error.
        return ["ps", "-o", "pid=,args=", "-p", ",".join(job_ids)]

    def parse_status(self, out: str, job_ids: Iterable[str]) -> Dict[str, StatusInfo]:
        wanted = set(job_ids)
        result: Dict[str, StatusInfo] = {}
        for line in out.splitlines():
            m = re.match(r"\s*(\d+)\s+(.*)", line)
            # the pid must still be our job script (pids are reused)
            if m and m.group(1) in wanted and MARKER in m.group(2):
                result[m.group(1)] = StatusInfo(JobState.RUNNING, None, "running")
        return result

    def cancel_argv(self, job_id: str) -> List[str]:
        # the whole process group: the launcher and every rank it started
        return ["kill", "-TERM", "--", f"-{job_id}"]
