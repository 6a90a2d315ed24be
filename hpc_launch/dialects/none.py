"""No scheduler (`local`, SSH pods): the job script runs in the background in its own session.

The job id is the process id of the job's session leader; the log is NAME.o<pid> in the work
dir, and the exit-code file the script writes on exit tells how it ended.
"""

from __future__ import annotations

import re
from typing import Dict, Iterable, List, Mapping, Optional, Sequence

from ..protocol import SCRIPT_DIR
from ..states import JobState
from .base import Allocation, CancelOutcome, Dialect, FailureWording, Run, StatusInfo, last_matching_line

# $1 = log name prefix (NAME.o), $2 = script. setsid makes the job its own session and process
# group (pid == pgid == sid), so cancel can signal the whole tree. `echo $$` hands back the id
# before stdout leaves the submit command's pipe. Nothing starts until submit has recorded the
# job and written SCRIPT.go (`release_path`): a submit killed before its record (kill -9 cannot
# be held off) leaves no job running unknown. While it waits the launcher gives up when the
# submitting process is gone (HPC_LAUNCH_SUBMITTER, set where it runs on this machine) or after
# RELEASE_WAIT_S (over SSH the submitter is not visible from here); giving up, it removes its
# script and its --pass-env file (secrets.path_for) and runs nothing.
RELEASE_SUFFIX = ".go"
RELEASE_WAIT_S = 120
_GATE = (
    "s=${HPC_LAUNCH_SUBMITTER:-}; unset HPC_LAUNCH_SUBMITTER; n=0; "
    'until [ -e "$2.go" ]; do '
    'if [ "$n" -ge %d ] || { [ -n "$s" ] && '
    'case "$(ps -o stat= -p "$s" 2>/dev/null)" in ""|Z*) true;; *) false;; esac; }; '  # gone, or a zombie
    # looked for again: a submitter writes the file, then ends, maybe both since the look above
    'then [ -e "$2.go" ] && break; rm -f -- "$2" "${2%%.sh}.secrets"; exit 0; fi; '
    "sleep 0.05; n=$((n+1)); done; "
    'rm -f -- "$2.go"; '
) % (RELEASE_WAIT_S * 20)
_LAUNCH = (
    'setsid bash -c \'echo "$$"; exec >/dev/null 2>&1 </dev/null; '
    + _GATE.replace("'", "'\\''")
    + 'exec >"$1$$" 2>&1; HPC_LAUNCH_JOB_ID=$$ exec bash "$2"\' hpc-launch-job "$1" "$2" &'
)


_CANCEL = (
    "n=$(ps -e -o pgid=,stat= | awk -v g=\"$1\" '$1 == g && $2 ~ /^T/' | wc -l); "
    'kill -TERM -- "-$1" || exit; '
    '[ "$n" -eq 0 ] && exit 0; kill -CONT -- "-$1" 2>/dev/null; '
    '[ "$n" -eq 1 ] && w=process || w=processes; '
    'echo "$n stopped $w of the job continued, so the signal reaches them"'
)


def release_path(script_path: str) -> str:
    """The file whose existence lets a launched job start (written once its record exists)."""
    return script_path + RELEASE_SUFFIX


MARKER = SCRIPT_DIR + "/"  # every script we start lives under WORKDIR/.hpc-launch/


class NoScheduler(FailureWording, Allocation, Dialect):
    name = "none"
    title = "no scheduler (local, SSH pods)"
    has_scheduler = False
    directive_prefix = ""
    submit_program = "bash"
    job_id_expr = "${HPC_LAUNCH_JOB_ID:-$$}"
    job_num_expr = "${HPC_LAUNCH_JOB_ID:-$$}"
    nodelist_shell = ""
    # No scheduler ends the job at its walltime: its own script does (templates/body/walltime.sh.j2),
    # SIGKILL to what still runs this long after SIGTERM ($HPC_LAUNCH_KILL_GRACE_S overrides it)
    kill_grace_s = 30
    failure_wording = {"walltime": (r"^\[hpc-launch\] walltime \S+ reached: no scheduler here",)}

    def submit_argv(
        self,
        script_path: str,
        *,
        submit_flags: Sequence[str] = (),
        program: Optional[Sequence[str]] = None,
        log_prefix: str = "job.o",
        depend_on: Optional[str] = None,
    ) -> List[str]:
        return ["bash", "-c", _LAUNCH, "hpc-launch-submit", log_prefix, script_path]

    def parse_submit(self, out: str) -> str:
        return last_matching_line(out, r"^(\d+)$", "launch").group(1)

    def alloc_argv(
        self, directives: Sequence[str], command: Sequence[str], *, submit_flags: Sequence[str] = ()
    ) -> List[str]:
        # no scheduler: this machine is the allocation, `command` runs here as it is
        return list(command)

    def status_argv(self, job_ids: Sequence[str]) -> List[str]:
        # Every process of the jobs' sessions (setsid: sid == pid of the job script), with its
        # state: a zombie has ended. `ps` exits 1 when none is alive; that is an answer, not an error.
        return ["ps", "-ww", "-o", "pid=,sid=,stat=,args=", "--sid", ",".join(job_ids)]  # -ww: never cut the args

    def parse_status(self, out: str, job_ids: Iterable[str]) -> Dict[str, StatusInfo]:
        return self._parse(out, {j: "" for j in job_ids})

    def query_jobs(self, run: Run, jobs: Mapping[str, str]) -> Dict[str, StatusInfo]:
        return self._parse(run(self.status_argv(list(jobs))).out, jobs)

    def _parse(self, out: str, jobs: Mapping[str, str]) -> Dict[str, StatusInfo]:
        """A job is its session: alive while its script runs, or while ranks it started outlive
        a killed script. The script's own line must name the job's script: pids are reused.
        A zombie has ended: where nothing reaps (a PID 1 that does not, as in containers) a
        killed script stays in the table as `[bash] <defunct>` while its ranks run on."""
        leaders: Dict[str, str] = {}
        members: Dict[str, int] = {}
        for line in out.splitlines():
            m = re.match(r"\s*(\d+)\s+(\d+)\s+(\S+)\s+(.*)", line)
            if not m or m.group(2) not in jobs:
                continue
            pid, sid, stat, args = m.groups()
            if stat.startswith("Z"):
                continue
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

    def depend_flags(self, job_id: str) -> List[str]:
        raise NotImplementedError(f"{self.name} cannot hold a job for another")  # spec refuses --chain here

    def cancel_argv(self, job_id: str) -> List[str]:
        # The whole process group: the launcher and every rank it started. A stopped process
        # (SIGSTOP, Ctrl-Z) holds SIGTERM until it continues: SIGCONT after it, and say so.
        return ["bash", "-c", _CANCEL, "hpc-launch-cancel", job_id]

    def parse_cancel(self, rc: int, out: str, err: str) -> CancelOutcome:
        if rc != 0 and "no such process" in (err or "").lower():
            return CancelOutcome(sent=False, already_ended=True, message=err.strip())
        if rc == 0:
            return CancelOutcome(sent=True, note=(out or "").strip())
        return super().parse_cancel(rc, out, err)
