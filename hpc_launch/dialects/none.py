"""No scheduler (`local`, SSH pods): the job script runs in the background in its own session.

The job id is the process id of the job's session leader; the log is NAME.o<pid> in the work
dir, and the exit-code file the script writes on exit tells how it ended.
"""

from __future__ import annotations

import re
from typing import Dict, Iterable, List, Mapping, Sequence

from ..protocol import SCRIPT_DIR
from ..states import JobState
from .base import CancelOutcome, Dialect, StatusInfo, last_matching_line

# $1 = log name prefix (NAME.o), $2 = script. setsid makes the job its own session and process
# group (pid == pgid == sid), so cancel can signal the whole tree. `echo $$` hands back the id
# before stdout is redirected to the log.
_LAUNCH = (
    'setsid bash -c \'echo "$$"; exec >"$1$$" 2>&1 </dev/null; '
    'HPC_LAUNCH_JOB_ID=$$ exec bash "$2"\' hpc-launch-job "$1" "$2" &'
)
MARKER = SCRIPT_DIR + "/"  # every script we start lives under WORKDIR/.hpc-launch/


class NoScheduler(Dialect):
    name = "none"
    title = "no scheduler (local, SSH pods)"
    has_scheduler = False
    directive_prefix = ""
    submit_program = "bash"
    job_id_expr = "${HPC_LAUNCH_JOB_ID:-$$}"
    job_num_expr = "${HPC_LAUNCH_JOB_ID:-$$}"
    nodelist_shell = ""

    def submit_argv(self, script_path, *, submit_flags=(), program=None, log_prefix: str = "job.o", depend_on=None):
        return ["bash", "-c", _LAUNCH, "hpc-launch-submit", log_prefix, script_path]

    def parse_submit(self, out: str) -> str:
        return last_matching_line(out, r"^(\d+)$", "launch").group(1)

    def alloc_argv(self, directives, command, *, submit_flags=()):
        # no scheduler: this machine is the allocation, `command` runs here as it is
        return list(command)

    def status_argv(self, job_ids: Sequence[str]) -> List[str]:
        # Every process of the jobs' sessions (setsid: sid == pid of the job script). `ps` exits
        # 1 when none is alive; that is an answer, not an error.
        return ["ps", "-ww", "-o", "pid=,sid=,args=", "--sid", ",".join(job_ids)]  # -ww: never cut the args

    def parse_status(self, out: str, job_ids: Iterable[str]) -> Dict[str, StatusInfo]:
        return self._parse(out, {j: "" for j in job_ids})

    def query_jobs(self, run, jobs: Mapping[str, str]) -> Dict[str, StatusInfo]:
        return self._parse(run(self.status_argv(list(jobs))).out, jobs)

    def _parse(self, out: str, jobs: Mapping[str, str]) -> Dict[str, StatusInfo]:
        """A job is its session: alive while its script runs, or while ranks it started outlive
        a killed script. The script's own line must name the job's script: pids are reused."""
        leaders: Dict[str, str] = {}
        members: Dict[str, int] = {}
        for line in out.splitlines():
            m = re.match(r"\s*(\d+)\s+(\d+)\s+(.*)", line)
            if not m or m.group(2) not in jobs:
                continue
            pid, sid, args = m.groups()
            if pid == sid:
                leaders[sid] = args
            else:
                members[sid] = members.get(sid, 0) + 1
        result: Dict[str, StatusInfo] = {}
        for job_id, script in jobs.items():
            args = leaders.get(job_id)
            if args is not None:
                if MARKER in args and (not script or script in args):
                    result[job_id] = StatusInfo(JobState.RUNNING, None, "running")
                continue  # the pid now belongs to some other program: our job has ended
            if members.get(job_id):
                n = members[job_id]
                result[job_id] = StatusInfo(
                    JobState.RUNNING,
                    None,
                    "orphaned",
                    comment=(
                        f"the job script is gone but {n} of its processes still run (`hpc-launch cancel` stops them)"
                    ),
                )
        return result

    def cancel_argv(self, job_id: str) -> List[str]:
        # the whole process group: the launcher and every rank it started
        return ["kill", "-TERM", "--", f"-{job_id}"]

    def parse_cancel(self, rc: int, out: str, err: str) -> CancelOutcome:
        if rc != 0 and "no such process" in (err or "").lower():
            return CancelOutcome(sent=False, already_ended=True, message=err.strip())
        return super().parse_cancel(rc, out, err)
