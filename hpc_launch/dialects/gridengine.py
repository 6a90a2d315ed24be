"""Grid Engine (ABCI 2.0: Altair/Univa Grid Engine; the testbed: Son of Grid Engine 8.1.9).

State letters are qstat(1)'s and sge_status(5)'s: d(eletion) E(rror) h(old) q(ueued) r(unning)
R(estarted) s/S(uspended) t(ransferring) T(hreshold) w(aiting) z(ombie), in combinations such as
`hqw`, `Eqw`, `dr`, `Rr`, plus x (exiting), the one other letter qstat's writer knows
(source/libs/sgeobj/sge_job.c job_get_state_string, source/common/symbols.h). `failed` codes of
qacct(1) are sge_status(5)'s table (source/common/execution_states.c).
"""

from __future__ import annotations

import re
from typing import Dict, Iterable, List, Optional, Sequence

from msgspec.structs import replace

from ..errors import SchedulerError
from ..states import JobState
from .base import (
    Allocation,
    Arrays,
    CancelOutcome,
    Dialect,
    FailureWording,
    HostExclusion,
    Run,
    StatusInfo,
    TestSubmission,
    WouldStart,
    flags_of,
    last_matching_line,
)

_LETTERS = set("dEhqrRsStTwxz")
# "qmaster enforced h_rt, h_cpu, or h_vmem limit": also the execution daemon's own kill for h_rt,
# h_cpu or h_vmem (execd_ck_to_do.c sets it; reaper_execd.c clean_up_job keeps it)
FAILED_LIMIT = 37
# "assumedly after job": the job's shell died of a signal (reaper_execd.c clean_up_job), 128 + n
# in exit_status. qdel ends a running job with SIGKILL (137); Grid Engine's limit kills are 37.
FAILED_AFTER_JOB = 100
EXIT_SIGKILL = 128 + 9


def state_of(code: str) -> StatusInfo:
    """A qstat state word -> StatusInfo. Letters qstat does not document: UNKNOWN, which never
    ends a job."""
    letters = set(code)
    if not code or not letters <= _LETTERS:
        return StatusInfo(JobState.UNKNOWN, None, code)
    if "E" in letters:  # pending with an error (Eqw, Ehqw, EhRqw): waits for `qmod -cj` after a fix, or qdel
        return StatusInfo(JobState.QUEUED, None, code, comment=f"error state ({code})", never_runs=True)
    if "z" in letters:  # zombie (qstat -s z): finished, the exit-code file (or qacct) says how
        return StatusInfo(JobState.UNKNOWN, None, code, ended=True)
    deleting = "being deleted" if "d" in letters else ""
    if letters & set("sST"):
        note = {
            "s": "suspended (qmod -sj)",
            "S": "suspended: its queue is suspended",
            "T": "suspended: a queue threshold was exceeded",
        }
        why = "; ".join(note[c] for c in "sST" if c in letters)
        return StatusInfo(JobState.QUEUED, None, code, comment="; ".join(w for w in (why, deleting) if w))
    if letters & set("rtx"):  # r, t, Rr, Rt, hr, dr, dt: started (t: being sent to its host, x: exiting)
        return StatusInfo(JobState.RUNNING, None, code, comment=deleting)
    if letters & set("qw"):  # qw, hqw, hRwq, Rq
        held = "held (qhold, qsub -h or -hold_jid)" if "h" in letters else ""
        return StatusInfo(JobState.QUEUED, None, code, comment="; ".join(w for w in (held, deleting) if w))
    return StatusInfo(JobState.UNKNOWN, None, code)


def error_state_words(state_words: str, reason: str, job_id: str) -> str:
    """What an error state (Eqw) means to its owner: Grid Engine never retries such a job, it
    waits for the user to fix the cause and clear the error (qmod(1) `-cj`: "clears the error
    state of the specified jobs"), or to delete it."""
    why = f": {reason}" if reason else " (`qstat -j` gives no error reason)"
    number = job_id.split(".")[0]  # qmod -cj takes the job (all its tasks) or `ID -t N`
    return f"{state_words}{why}; it waits for you: fix that, then `qmod -cj {number}` queues it again"


def parse_table(text: str) -> Dict[str, List[str]]:
    """qstat's job table -> {job id: [state word of each line]} (an array job has a line per
    task). The state column is found from the header, which moves with -ext, -pri, -urg, site
    columns (ABCI's `jclass`) and wide ids; names hold no whitespace (qsub refuses them), so a
    row's words line up with the header's words up to the state column. `qstat -f` prints job
    lines without a header, in the plain table's first columns (id prior name user state)."""
    lines = text.splitlines()
    index, start, first = 4, -1, 0
    for i, line in enumerate(lines):
        words = line.split()
        if words[:1] == ["job-ID"] and "state" in words:
            index, start, first = words.index("state"), line.index(" state") + 1, i + 1
            break
    rows: Dict[str, List[str]] = {}
    for line in lines[first:]:
        words = line.split()
        if not words or not words[0].isdigit():
            continue  # rules, -r's indented detail lines, -f's queue lines and banners
        word = words[index] if len(words) > index else ""
        if (not word or not set(word) <= _LETTERS) and start >= 0 and line[start:].strip():
            word = line[start:].split()[0]  # by the header's position
        rows.setdefault(words[0], []).append(word)  # a word we cannot read: UNKNOWN, still there
    return rows


def parse_xml(text: str) -> Dict[str, List[str]]:
    """`qstat -xml` (any other options too, -f included) -> {job id: [state of each task]}."""
    import xml.etree.ElementTree as ET  # here: `hpc-launch hostfile` imports every dialect

    try:
        root = ET.fromstring(text.strip())
    except ET.ParseError:
        return {}
    rows: Dict[str, List[str]] = {}
    for job in root.iter("job_list"):
        number, state = job.findtext("JB_job_number"), job.findtext("state")
        if number:
            rows.setdefault(number.strip(), []).append((state or "").strip())
            for task in _task_ids(job.findtext("tasks") or ""):  # an array's tasks: `42.3` too
                rows.setdefault(f"{number.strip()}.{task}", []).append((state or "").strip())
    return rows


def _task_ids(text: str) -> List[int]:
    """qstat's `<tasks>`: `3` (a running task), `1-4:1` (pending ones), `1,2,4` -> [indices]."""
    out: List[int] = []
    for part in text.strip().split(","):
        m = re.fullmatch(r"(\d+)(?:-(\d+)(?::(\d+))?)?", part.strip())
        if m:
            first, last, step = int(m.group(1)), int(m.group(2) or m.group(1)), int(m.group(3) or 1)
            out += list(range(first, last + 1, max(step, 1)))
    return out


def _merge(infos: List[StatusInfo]) -> StatusInfo:
    """An array job's tasks -> one answer: the most alive task speaks for the job."""
    rank = {JobState.RUNNING: 0, JobState.QUEUED: 1, JobState.UNKNOWN: 2}
    return sorted(infos, key=lambda s: (rank.get(s.state, 3), s.never_runs))[0]


def _seconds(value: str) -> Optional[float]:
    """`600`, `1:00:00`, `6s`, `0.020` -> seconds."""
    value = value.strip().rstrip("s")
    if re.fullmatch(r"\d+(\.\d+)?", value):
        return float(value)
    m = re.fullmatch(r"(\d+):(\d+):(\d+)", value)
    return int(m.group(1)) * 3600 + int(m.group(2)) * 60 + int(m.group(3)) if m else None


class GridEngine(Arrays, HostExclusion, TestSubmission, FailureWording, Allocation, Dialect):
    name = "gridengine"
    title = "Grid Engine"
    directive_prefix = "#$"
    keyed_flags = ("-l", "-v")
    failure_wording = {"queue_limit": (r"Unable to run job: job rejected: (?P<why>.*?)\s*$",)}  # qsub
    submit_program = "qsub"
    test_submit_name = "qsub -w v"
    job_id_expr = "${JOB_ID:?not inside a Grid Engine job}"
    job_num_expr = "${JOB_ID}"
    nodelist_shell = (
        'if [ -n "${SGE_JOB_HOSTLIST:-}" ]; then cat "$SGE_JOB_HOSTLIST"; '
        "else awk '{print $1}' \"$PE_HOSTFILE\"; fi | awk '!seen[$0]++'"
    )
    # PE_HOSTFILE lines are `host slots queue processors` (sge_pe(5)); SGE_JOB_HOSTLIST (ABCI)
    # one host per line. nodelist.count_hosts reads both by their content.
    nodefile_vars = ("PE_HOSTFILE", "SGE_JOB_HOSTLIST")

    def parse_submit(self, out: str) -> str:
        # `Your job 42 ("name") has been submitted`, `Your job-array 42.1-4:1 (...)`, or -terse `42`.
        m = last_matching_line(out, r"^(?:Your job(?:-array)? (\d+)[.\s]|(\d+)(?:\.\S+)?$)", "qsub")
        return m.group(1) or m.group(2)

    def alloc_argv(
        self, directives: Sequence[str], command: Sequence[str], *, submit_flags: Sequence[str] = ()
    ) -> List[str]:
        # qrsh takes qsub's resource options; `-now no` waits in the queue as a batch job would
        # (qrsh's default gives up at once), `-pty y` gives the shell a terminal (qrsh(1))
        batch_only = ("-o", "-e", "-j", "-t", "-r")
        return ["qrsh", "-now", "no", "-pty", "y", *flags_of(self, directives, batch_only), *submit_flags, *command]

    # ---- before submitting: qsub -w v ----------------------------------------------------------
    def test_submit_argv(self, script_path: str, *, submit_flags: Sequence[str] = ()) -> List[str]:
        # qsub(1) `-w v`: "verify: ... the job is not submitted", checked as if the cluster were
        # empty. So it refuses what no queue can ever take (qsub itself queues a `-pe smp 99` that
        # never starts: seen on the testbed's 8.1.9) and says no start time.
        return [self.submit_program, "-w", "v", *submit_flags, script_path]

    def parse_test_submit(self, rc: int, out: str, err: str) -> WouldStart:
        # recorded: tests/golden/sched/sge_qsub_verify_*: `verification: found suitable queue(s)`,
        # exit 0; `Unable to run job: Job 147 cannot run in PE "smp" because it only offers 0
        # slots` / `verification: no suitable queues` / `Exiting.`, exit 1
        text = f"{out}\n{err}"
        if rc == 0 and "verification: found suitable queue" in text:
            return WouldStart()
        lines = [line.strip() for line in text.splitlines() if line.strip() and line.strip() != "Exiting."]
        if rc == 0 or not lines:
            shown = " | ".join(lines)[:200] or "(nothing)"
            raise SchedulerError(f"cannot read qsub -w v's answer (exit {rc}): {shown}")
        why = next((line for line in lines if line.startswith("Unable to run job:")), lines[0])
        return WouldStart(error=re.sub(r"^Unable to run job:\s*(?:job rejected:\s*)?", "", why))

    # ---- status ----------------------------------------------------------------------------
    def status_argv(self, job_ids: Sequence[str]) -> List[str]:
        # One query for all jobs. XML: the same answer whatever the site's sge_qstat defaults
        # add (-ext, -u '*', -f) and however wide ids and names are; qstat prints the user's
        # pending and running jobs (finished ones are gone: the exit-code file, then qacct).
        return ["qstat", "-xml"]

    def parse_status(self, out: str, job_ids: Iterable[str]) -> Dict[str, StatusInfo]:
        rows = parse_xml(out) if out.lstrip().startswith("<") else parse_table(out)
        wanted = set(job_ids)
        return {job: _merge([state_of(w) for w in words]) for job, words in rows.items() if job in wanted}

    def query(self, run: Run, job_ids: Sequence[str]) -> Dict[str, StatusInfo]:
        known = super().query(run, job_ids)
        for job, info in known.items():
            if info.never_runs:  # Eqw: the reason is only in `qstat -j`
                reason = self.error_reason(run(["qstat", "-j", job.split(".")[0]]).out)
                known[job] = replace(info, comment=error_state_words(info.comment, reason, job))
        return known

    @staticmethod
    def error_reason(text: str) -> str:
        """`error reason    1:      11/23/2026 00:43:32 [0:23880]: error: can't chdir to /x: No such
        file or directory` in `qstat -j` -> the message."""
        m = re.search(r"(?m)^error reason\s+\d+:\s+(?:\d\d/\d\d/\d{4} [\d:]+ )?(?:\[[^\]]*\]:\s*)?(.*?)\s*$", text)
        return m.group(1) if m else ""

    def accounting(self, run: Run, job_id: str) -> Optional[StatusInfo]:
        """qacct's record of a job that left qstat without an exit-code file; None while the
        record is not written yet (`error: job id N not found`) or the job never ran."""
        result = run(self.accounting_argv(job_id))
        if result.rc != 0 or "jobnumber" not in result.out:
            return None
        return self.parse_accounting(result.out)

    @staticmethod
    def accounting_argv(job_id: str) -> List[str]:
        number, _, task = job_id.partition(".")
        return ["qacct", "-j", number] + (["-t", task] if task else [])

    # ---- arrays: `-t 1-N`; task i is `ID.i` to qstat, qacct -t and qdel (log NAME.oID.i) ------
    array_index_var = "SGE_TASK_ID"
    array_first_index = 1
    array_job_num_expr = '"${JOB_ID}.${SGE_TASK_ID}"'

    def array_flags(self, count: int) -> List[str]:
        return ["-t", f"1-{count}"]

    def array_task_ids(self, parent_id: str, count: int) -> List[str]:
        return [f"{parent_id}.{i}" for i in range(1, count + 1)]

    def job_num(self, job_id: str) -> str:
        return job_id  # a number; a task's `42.3` is its log's number too (NAME.o42.3)

    @staticmethod
    def parse_accounting(out: str) -> StatusInfo:
        """One or more qacct records (an array job has one per task): the worst task's end."""
        infos = [
            _record_info(dict(re.findall(r"(?m)^(\w+)\s+(.*?)\s*$", rec)))
            for rec in re.split(r"(?m)^=+\s*$", out)
            if "jobnumber" in rec
        ]
        if not infos:
            return StatusInfo(JobState.UNKNOWN, None, "qacct", ended=True)
        order = [JobState.FAILED, JobState.TIMEOUT, JobState.CANCELLED, JobState.DONE]
        return sorted(infos, key=lambda s: order.index(s.state) if s.state in order else len(order))[0]

    # ---- cancel ----------------------------------------------------------------------------
    def cancel_argv(self, job_id: str) -> List[str]:
        return ["qdel", job_id]

    def exclude_flags(self, hosts: Sequence[str]) -> List[str]:
        # a hard request on the host name: sge_types(1) wildcard expressions allow `!` and `|`
        return ["-l", f"h=!({'|'.join(hosts)})"] if hosts else []

    def depend_flags(self, job_id: str) -> List[str]:
        return ["-hold_jid", job_id]

    def parse_cancel(self, rc: int, out: str, err: str) -> CancelOutcome:
        # rc 0 `root has registered the job 20 for deletion` (running: ends asynchronously) or
        # `root has deleted job 21` (pending: gone); rc 1 `denied: job "20" does not exist`
        # (ended, or never ours); `job 20 is already in deletion` (a second qdel).
        text = " ".join(f"{out or ''}\n{err or ''}".split())
        if "already in deletion" in text:
            return CancelOutcome(sent=True, message=text)
        return super().parse_cancel(rc, out, err)


def _record_info(fields: Dict[str, str]) -> StatusInfo:
    """One qacct record: `failed` (sge_status(5)), `exit_status`, `deleted_by` (Univa/Altair only:
    Son of Grid Engine 8.1.9 and its forebears write no line for it, source/clients/qacct/qacct.c)."""
    raw_exit = (fields.get("exit_status") or "").split()  # `137   (Killed)`
    code = int(raw_exit[0]) if raw_exit and raw_exit[0].lstrip("-").isdigit() else None
    failed_text = fields.get("failed", "0").strip()
    failed_code = int(failed_text.split()[0]) if failed_text.split()[0:1] and failed_text.split()[0].isdigit() else 0
    failed_why = failed_text.split(":", 1)[1].strip() if ":" in failed_text else ""
    deleted_by = fields.get("deleted_by")  # None: this qacct cannot say who deleted a job
    if deleted_by and deleted_by.strip() != "NONE":
        return StatusInfo(JobState.CANCELLED, code, "qacct", comment=f"deleted by {deleted_by}")
    if failed_code == 0:
        return StatusInfo(JobState.DONE if code == 0 else JobState.FAILED, code, "qacct")
    comment = f"Grid Engine: failed {failed_code}" + (f": {failed_why}" if failed_why else "")
    if failed_code == FAILED_LIMIT:
        limit = _h_rt(fields.get("category", ""))
        wall = _seconds(fields.get("ru_wallclock", "") or fields.get("wallclock", ""))
        over_time = limit is not None and wall is not None and wall >= limit
        memory_or_cpu = re.search(r"\bh_(vmem|cpu)=", fields.get("category", "")) is not None
        state = JobState.TIMEOUT if over_time or not memory_or_cpu else JobState.FAILED
        return StatusInfo(state, code, "qacct", comment=comment)
    if failed_code == FAILED_AFTER_JOB and code == EXIT_SIGKILL and deleted_by is None:
        # What qdel of a running or suspended job leaves (recorded on SGE 8.1.9,
        # tests/golden/elsewhere/testbed_sge_qacct_deleted_*.txt). A kill -9 of the job's shell
        # from outside Grid Engine would read the same; our script's trap survives the usual OOM
        # kill of its training process, so this record is only read when the whole job died.
        return StatusInfo(
            JobState.CANCELLED, code, "qacct", comment=comment + " (SIGKILL: a qdel, or a kill -9 from outside)"
        )
    if failed_code == FAILED_AFTER_JOB:  # sge_status(5): a signal, a task or the shepherd died, a node crash
        why = "deleted_by NONE: not a qdel" if deleted_by is not None else "not qdel's SIGKILL"
        return StatusInfo(JobState.FAILED, code, "qacct", comment=f"{comment} (killed by a signal, {why})")
    # 17 "through signal" (the shepherd itself died) and the rest: the job's life (jobs/state.py)
    # makes a failure after a cancel we asked for a cancel
    return StatusInfo(JobState.FAILED, code, "qacct", comment=comment)


def _h_rt(category: str) -> Optional[float]:
    m = re.search(r"\bh_rt=([\d:.]+)", category)
    return _seconds(m.group(1)) if m else None
