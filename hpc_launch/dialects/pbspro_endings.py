"""How a PBS Professional job ended, from what qstat and MoM say: the job_state letters, the
Exit_status values and substates PBS sets itself, the server's comments and MoM's kill lines, and
an array's verdict from its subjobs (OpenPBS's own numbers and words: src/include/job.h,
src/server/svr_jobfunc.c, src/resmom/mom_main.c)."""

from __future__ import annotations

import json
import re
from typing import Dict, List, Optional, Tuple

from ..states import JobState
from .answers import StatusInfo
from .pbspro_qstat import _int, qstat_time

# Exit_status values PBS sets itself: -24..-29 MoM killed the job for exceeding ncpus (burst,
# sum), vmem, mem, cput, walltime (src/resmom/mom_main.c mom_over_limit sets them; the top shell's
# wait status never overwrites a negative one: catch_child.c scan_for_exiting), and the server's
# comment then ends "... and exceeded resource NAME" (svr_jobfunc.c update_job_finish_comment);
# -11 requeued (node failure, qrerun). A job whose top shell died of signal n gets 256 + n:
# 271 = SIGTERM (qdel of a running job), 265 = SIGKILL (qdel -W force), but also a signal from
# anyone else (the cgroup hook's OOM kill, an admin's kill).
JOB_EXEC_KILL_WALLTIME = -29
JOB_EXEC_KILL = {-24: "ncpus (burst)", -25: "ncpus (sum)", -26: "vmem", -27: "mem", -28: "cput", -29: "walltime"}
KILLED_BY_SIGNAL = 256
# Substates of a finished (F) job (src/include/job.h): 91 only when a delete request ended it
# (req_delete.c req_deletejob2 sets ji_terminated; svr_jobfunc.c svr_setjob_histinfo gives 91 iff
# that is set; comment "... and terminated [by USER@HOST]"); else 93 when Exit_status is not 0
# (a limit kill included), 92 when it is.
SUB_TERMINATED, SUB_FINISHED, SUB_FAILED = 91, 92, 93
_LIMIT_COMMENT = re.compile(r"\band exceeded resource (\w+)")
# MoM's own words for a limit kill (mom_main.c: "job killed: %s %s exceeded limit %s"), which it
# writes to the job's stderr and which sites' qstat show as the job's comment beside Exit_status
# 271 when MoM sent SIGTERM itself (the kill came before the negative code could be set).
_MOM_KILL = re.compile(r"\bjob killed: (\w+) \S+ exceeded limit \S+")
# The server's comment for a job a delete request ended (svr_jobfunc.c: "... and terminated").
_TERMINATED_COMMENT = re.compile(r"\band terminated\b")
NEVER_RUN = "Can Never Run"  # the scheduler's prefix (src/scheduler/constant.h NEVER_RUN_PREFIX)

# Every job_state letter qstat documents; F, X (expired subjob) and C (Torque) are ends.
_LETTER = {
    "Q": JobState.QUEUED,
    "H": JobState.QUEUED,  # held: by a user, or waiting on a dependency
    "W": JobState.QUEUED,  # waiting for its -a start time
    "T": JobState.QUEUED,  # in transit between queues or servers
    "M": JobState.QUEUED,  # moved to another server (peer scheduling): it runs there, not ended here
    "S": JobState.QUEUED,
    "U": JobState.QUEUED,  # suspended (by the scheduler, or workstation busy)
    "R": JobState.RUNNING,
    "E": JobState.RUNNING,  # E: exiting, output still being staged out
    "B": JobState.RUNNING,  # an array whose subjobs have begun
}
_ENDED = {"F", "X", "C"}


def kill_reason(log_text: str) -> Optional[StatusInfo]:
    """The line MoM writes to the job's stderr (our log, with `-j oe`) when it kills the job for a
    limit: `=>> PBS: job killed: walltime 12 exceeded limit 5`. Tells how the job ended when the
    scheduler has forgotten it (history off): timeout for walltime, failed for anything else."""
    found = re.findall(r"(?m)^=>> PBS: job killed: ((\w+) .*exceeded limit.*?)\s*$", log_text)
    if not found:
        return None
    words, resource = found[-1]
    state = JobState.TIMEOUT if resource == "walltime" else JobState.FAILED
    return StatusInfo(state, None, "killed", comment=f"killed by PBS: {words}")


def _signal_kill(code: int, attrs: Dict[str, str]) -> str:
    """`killed by SIGKILL, not by qdel` for Exit_status 256 + n, with the cgroup hook's reason
    (`resources_used.diag_messages = '{"node":"Cgroup mem limit exceeded"}'`, pbs_cgroups.PY
    set_diag_messages) when it gave one."""
    try:
        import signal  # only here: a dry-run imports this module and never needs it

        name = signal.Signals(code - KILLED_BY_SIGNAL).name
    except ValueError:
        name = f"signal {code - KILLED_BY_SIGNAL}"
    diag = attrs.get("resources_used.diag_messages", "").strip().strip("'")
    try:
        found = json.loads(diag) if diag else {}
    except ValueError:
        found = None
    if not isinstance(found, dict):
        found = {"": diag}
    why = "; ".join(f"{node}: {msg}" if node else str(msg) for node, msg in found.items() if msg)
    return f"killed by {name}, not by qdel" + (f" ({why})" if why else "")


def _signal_end(code: int, letter: str, substate: Optional[int], comment: str, attrs: Dict[str, str]) -> StatusInfo:
    """A finished job whose top shell died of a signal (Exit_status 256 + n). The substate (91) or
    the server's comment ("... and terminated") says a delete request sent it: cancelled. With
    neither, nothing says qdel did: failed by that signal, which jobs/state turns into cancelled
    when the user asked for one. Only Torque's `C` (no substate, no comment of that form, and a
    walltime kill that also ends in SIGTERM) is left to the exit-code file and MoM's log line."""
    how = _signal_kill(code, attrs)
    if substate is None and _TERMINATED_COMMENT.search(comment):  # 91 was read before (job_info)
        return StatusInfo(JobState.CANCELLED, code, letter, comment=comment)
    if substate is None and letter != "F":
        return StatusInfo(JobState.UNKNOWN, code, letter, ended=True, comment=comment or how)
    if substate is None:
        how = f"{how.replace(', not by qdel', '')} (Exit_status {code}); PBS did not say whether a qdel sent it"
    return StatusInfo(JobState.FAILED, code, letter, comment="; ".join(w for w in (comment, how) if w))


def exit_state(code: int) -> JobState:
    """An exit status -> its end: the script's own code, or one PBS set itself."""
    if code == 0:
        return JobState.DONE
    if code == JOB_EXEC_KILL_WALLTIME:
        return JobState.TIMEOUT
    # the script's own code; a kill for another limit (mem, vmem, cput, ncpus: -24..-28);
    # -11 (a non-rerunnable job deleted on requeue); PBS's other start failures (-1..-30);
    # 256 + n, a signal: a qdel only when the substate says so (job_info)
    return JobState.FAILED


def job_info(attrs: Dict[str, str]) -> StatusInfo:
    """One job's qstat -f attributes -> StatusInfo."""
    letter = attrs.get("job_state", "").strip()
    comment = attrs.get("comment", "").strip()
    if letter not in _ENDED:
        state = _LETTER.get(letter, JobState.UNKNOWN)  # an unknown letter never ends a job
        return StatusInfo(
            state,
            None,
            letter,
            comment=comment,
            never_runs=comment.startswith(NEVER_RUN),
            estimated_start=qstat_time(attrs.get("estimated.start_time", "")),
        )
    substate = _int(attrs.get("substate"))
    code = _int(attrs.get("Exit_status", attrs.get("exit_status")))
    if attrs.get("array", "").strip() == "True":
        # The parent's Exit_status says nothing about its subjobs (0 with a failed subjob);
        # its substate does: the first failed or deleted subjob's. `query` reads the subjobs.
        verdict = {
            SUB_TERMINATED: JobState.CANCELLED,
            SUB_FAILED: JobState.FAILED,
            SUB_FINISHED: JobState.DONE,
        }.get(substate or 0)
        if verdict is None:
            return StatusInfo(JobState.UNKNOWN, None, letter, ended=True, comment=comment)
        return StatusInfo(verdict, None, letter, comment=comment)
    if substate == SUB_TERMINATED:  # deleted with qdel, whatever its exit status (271, 265, 143, none)
        return StatusInfo(JobState.CANCELLED, code, letter, comment=comment)
    limit = _LIMIT_COMMENT.search(comment) or _MOM_KILL.search(comment)
    if limit or code in JOB_EXEC_KILL:  # killed by MoM for a limit: never a cancel
        resource = limit.group(1) if limit else JOB_EXEC_KILL[code or 0]
        state = JobState.TIMEOUT if resource == "walltime" else JobState.FAILED
        if limit and limit.re is _MOM_KILL:
            comment = f"killed by PBS for exceeding its {resource} limit ({limit.group(0)})"
        return StatusInfo(state, code, letter, comment=comment)
    if code is not None and code > KILLED_BY_SIGNAL:
        return _signal_end(code, letter, substate, comment, attrs)
    if code is not None:
        return StatusInfo(exit_state(code), code, letter, comment=comment)
    # Ended without an exit status.
    depend = attrs.get("depend", "").strip()
    if depend:  # never ran: its afterok parent failed, or the dependency was rejected
        return StatusInfo(
            JobState.FAILED, None, letter, comment=comment or f"never ran: dependency {depend} not satisfied"
        )
    # A subjob whose record is gone is reported from its parent as "Subjob finished|failed|terminated".
    if substate == SUB_FAILED or comment == "Subjob failed":
        return StatusInfo(JobState.FAILED, None, letter, comment=comment)
    if comment == "Subjob terminated":
        return StatusInfo(JobState.CANCELLED, None, letter, comment=comment)
    if comment == "Subjob finished":
        return StatusInfo(JobState.DONE, 0, letter, comment=comment)
    # Torque's C, or a job moved to another server that finished there: the exit-code file decides.
    return StatusInfo(JobState.UNKNOWN, None, letter, ended=True, comment=comment)


def _array_verdict(parent: StatusInfo, subs: List[Tuple[str, StatusInfo]]) -> StatusInfo:
    bad = [(job, info) for job, info in subs if info.state in (JobState.FAILED, JobState.TIMEOUT)]
    if bad:
        job, info = bad[0]
        state = JobState.FAILED if any(i.state == JobState.FAILED for _, i in bad) else JobState.TIMEOUT
        how = f"exit status {info.exit_code}" if info.exit_code is not None else info.comment or info.state.value
        return StatusInfo(
            state, info.exit_code, parent.raw, comment=f"{len(bad)} of {len(subs)} subjobs failed, first {job}: {how}"
        )
    deleted = [info for _, info in subs if info.state == JobState.CANCELLED]
    if deleted or parent.state == JobState.CANCELLED:
        comment = f"{len(deleted)} of {len(subs)} subjobs deleted" if deleted else parent.comment
        return StatusInfo(JobState.CANCELLED, None, parent.raw, comment=comment)
    if parent.state == JobState.FAILED:  # the subjob records are gone, the parent remembers
        return parent
    if all(info.state == JobState.DONE for _, info in subs):
        return StatusInfo(JobState.DONE, 0, parent.raw, comment=parent.comment)
    return parent
