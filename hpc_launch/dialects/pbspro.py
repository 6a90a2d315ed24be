"""PBS Professional (ABCI 3.0, Miyabi, Polaris), as a real OpenPBS 23.06 server behaves
(tests/golden/pbspro-observed, with its RECORDING.md). Also drives Slurm's Torque-style
qsub/qstat/qdel wrappers (the testbed), which have no `qstat -x`, no substates and bare ids.

Numbers and words below are OpenPBS's own (src/include/job.h, src/server/svr_jobfunc.c).
"""

from __future__ import annotations

import json
import re
import time
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from ..errors import SchedulerError
from ..states import JobState
from .base import (
    Allocation,
    Arrays,
    CancelOutcome,
    Dialect,
    FailureWording,
    Run,
    StartEstimates,
    StatusInfo,
    flags_of,
    last_matching_line,
)

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

_HEADER = re.compile(r"^(Job Id|Queue|Server):?\s+(\S+)\s*$")  # qstat -f / -Qf / -Bf, qmgr list
_ARRAY = re.compile(r"^(\d+)\[(\d*)\]$")  # the sequence part of `16[]` (array) or `16[3]` (subjob)


def parse_full(text: str, kind: str = "Job Id") -> List[Tuple[str, Dict[str, str]]]:
    """`qstat -f` text: [(id, {attribute: value})] of the `kind` blocks (Job Id, Queue, Server).
    Attribute lines start with 4 spaces (a TAB in Torque-style output); long values wrap onto
    lines that start with one TAB and are joined with nothing in between, since the wrap falls
    anywhere, mid-word included. A line with no indent continues a value that holds a raw
    newline (an exported bash function under `qsub -V`)."""
    blocks: List[Tuple[str, Dict[str, str]]] = []
    attrs: Optional[Dict[str, str]] = None
    key = indent = None
    for line in text.split("\n"):
        head = _HEADER.match(line)
        if head:
            attrs, key, indent = {}, None, None
            if head.group(1) == kind:
                blocks.append((head.group(2), attrs))
            continue
        if attrs is None or not line.strip():
            continue
        if indent is None:
            indent = "\t" if line.startswith("\t") else "    "
        m = re.match(re.escape(indent) + r"([A-Za-z_][\w.]*) =(?: (.*))?$", line)
        if m:
            key = m.group(1)
            attrs[key] = m.group(2) or ""  # exact: a value may end in a space (state_count)
        elif key is not None:
            wrapped = indent != "\t" and line.startswith("\t")
            attrs[key] += line[1:] if wrapped else "\n" + line
    return blocks


def variable_list(value: str) -> Dict[str, str]:
    """Variable_List text (`A=1,B=x\\,y,...`): commas inside values are escaped as `\\,`,
    quotes and backslashes as `\\"` and `\\\\`."""
    out: Dict[str, str] = {}
    for item in re.findall(r"(?:\\.|[^,\\])+", value, flags=re.S):
        name, _, val = item.partition("=")
        out[name] = re.sub(r"\\(.)", r"\1", val, flags=re.S)
    return out


def parse_table(text: str) -> Dict[str, Tuple[str, str]]:
    """The default `qstat` table (also -w, -answ1, -x, -t, Torque's): {id: (state letter, comment)}.
    Columns are found from the dashes under the header, not by counting words (names are cut
    and padded, `-answ1` adds columns and puts the comment on its own line)."""
    lines = text.split("\n")
    for i, line in enumerate(lines[1:], 1):
        if re.fullmatch(r"-+( +-+)+ *", line):
            spans = [m.span() for m in re.finditer(r"-+", line)]
            header = lines[i - 1]
            col = next((s for s in spans if header[s[0] : s[1]].strip() == "S"), None)
            break
    else:
        return {}
    rows: Dict[str, Tuple[str, str]] = {}
    last = None
    for line in lines[i + 1 :]:
        if not line.strip():
            continue
        if line[0] == " " and last is not None:  # -answ1 -s: the comment line ("    -- " when none)
            rows[last] = (rows[last][0], "" if line.strip() == "--" else line.strip())
            continue
        if col is not None and len(line) >= col[1]:
            last = line.split()[0]
            rows[last] = (line[col[0] : col[1]].strip(), "")
    return rows


def qstat_time(value: str) -> Optional[float]:
    """A `qstat -f` time (`Sun Nov 22 22:25:24 2026`, the server's local time, read as ours)
    -> epoch seconds; None when absent or unreadable. The scheduler's backfill sets the job's
    `estimated.start_time` when it computes one (pbs_job_attributes(7B), "estimated";
    https://github.com/openpbs/openpbs/blob/master/doc/man1/pbs_job_attributes.7B)."""
    try:
        return time.mktime(time.strptime(" ".join(value.split()), "%a %b %d %H:%M:%S %Y"))
    except ValueError:
        return None


def _int(value: Optional[str]) -> Optional[int]:
    return int(value) if value and re.fullmatch(r"-?\d+", value.strip()) else None


def _key(job_id: str) -> str:
    """What identifies a job across outputs: `51` for `51.pbshead` (and the wrapper's bare `51`)."""
    return job_id.split(".", 1)[0]


def is_array(job_id: str) -> bool:
    return _key(job_id).endswith("[]")


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


def directive_words(script: str) -> List[str]:
    """The words of a script's `#PBS` lines, read as qsub reads them: up to the first line that is
    neither blank nor a comment (a later `#PBS` line is ignored, 185-186)."""
    words: List[str] = []
    for line in script.splitlines()[1:]:
        text = line.strip()
        if text and not text.startswith("#"):
            break
        if text.startswith("#PBS"):
            words += text[4:].split()
    return words


def _array_range(words: List[str]) -> List[int]:
    """The indices of qsub's `-J X-Y[:Z][%N]` among `words` (`-J 1-2` or `-J1-2`); [] without one."""
    for i, word in enumerate(words):
        value = words[i + 1] if word == "-J" and i + 1 < len(words) else word[2:] if word.startswith("-J") else ""
        m = re.fullmatch(r"(\d+)-(\d+)(?::(\d+))?(?:%\d+)?", value)
        if m:
            first, last, step = int(m.group(1)), int(m.group(2)), int(m.group(3) or 1)
            return list(range(first, last + 1, max(step, 1)))[:100000]  # PBS's max_array_size default is 10000
    return []


class PBSPro(Arrays, StartEstimates, FailureWording, Allocation, Dialect):
    name = "pbspro"
    title = "PBS Professional"
    directive_prefix = "#PBS"
    submit_program = "qsub"
    job_id_expr = "${PBS_JOBID:?not inside a PBS job}"
    # `51.pbshead` -> 51; a subjob `16[3].pbshead` -> 16.3, as PBS names its log (NAME.o16.3).
    job_num_expr = '"${PBS_JOBID%%[.[]*}${PBS_ARRAY_INDEX:+.$PBS_ARRAY_INDEX}"'
    nodelist_shell = "awk '!seen[$0]++' \"$PBS_NODEFILE\""
    nodefile_vars = ("PBS_NODEFILE",)
    keyed_flags = ("-l", "-W", "-v")
    # PBS Professional converts an old-style `-l nodes=` request into a select statement
    key_aliases = {"-l nodes": "-l select"}
    # MoM's kill lines (mom_main.c) and qsub's / the scheduler's refusals (pbs_messages.c,
    # src/scheduler/constant.h NEVER_RUN_PREFIX), as the real server prints them
    failure_wording = {
        "walltime": (
            r"=>> PBS: job killed: walltime (?P<used>\d+) exceeded limit (?P<limit>\d+)",
            r"killed by PBS: walltime (?P<used>\d+) exceeded limit (?P<limit>\d+)",
        ),
        "host_oom": (r"(?:job killed|killed by PBS): (?P<resource>p?v?mem) \S+ exceeded limit",),
        "queue_limit": (
            r"qsub: Job violates queue and/or server resource limits",
            r"Job rejected by all possible destinations",
            r"Can Never Run: (?P<why>.*?)\s*$",
        ),
    }

    # StartEstimates: qstat -f's estimated.start_time, when the backfill computes it (job_info)

    def log_verdict(self, log_tail: str) -> Optional[StatusInfo]:
        return kill_reason(log_tail)

    # ---- submit --------------------------------------------------------------------------
    def submit_flags(self, name: str) -> List[str]:
        # Torque-style qsub front-ends (Slurm's wrapper) override the script's -N/-j with their
        # own defaults unless they are on the command line; real PBS Pro accepts both.
        return ["-N", name, "-j", "oe"]

    def alloc_argv(
        self, directives: Sequence[str], command: Sequence[str], *, submit_flags: Sequence[str] = ()
    ) -> List[str]:
        # `qsub -I ... -- program args`: the program instead of a login shell, on the first node
        # (PBS Professional's qsub(1B)); an interactive job has no log or array
        batch_only = ("-o", "-e", "-j", "-J", "-r", "-k")
        flags = flags_of(self, directives, batch_only)
        keep = [f for f, before in zip(submit_flags, ("", *submit_flags)) if f != "-j" and before != "-j"]
        return ["qsub", "-I", *flags, *keep, "--", *command]

    def parse_submit(self, out: str) -> str:
        # `51.pbshead`; `59[].pbshead` for an array (-J 1-3, -J 1-5:2); Slurm's wrapper: bare `51`.
        # Only a whole line counts, and the server name starts with a letter: noise around the
        # id (site banners, warnings) is skipped, an IP address or a sentence is never an id.
        return last_matching_line(out, r"^(\d+(?:\[\])?(?:\.[A-Za-z][\w.-]*)?)$", "qsub").group(1)

    # ---- arrays: `-J 1-N`; the array is `16[].server`, task i `16[i].server` (log NAME.o16.i) --
    array_index_var = "PBS_ARRAY_INDEX"
    array_first_index = 1
    array_job_num_expr = job_num_expr  # already `16.3` inside a subjob

    def array_flags(self, count: int) -> List[str]:
        return ["-J", f"1-{count}"]  # PBS refuses a range of one (qsub: illegal -J value)

    def array_task_ids(self, parent_id: str, count: int) -> List[str]:
        m = re.match(r"^(\d+)\[\](.*)$", parent_id)
        if not m:
            raise SchedulerError(
                f"qsub -J answered {parent_id!r}, not an array id like 16[].server",
                hint="this site's qsub does not make PBS arrays: run the sweep as separate jobs",
            )
        return [f"{m.group(1)}[{i}]{m.group(2)}" for i in range(1, count + 1)]

    def user_array_tasks(self, job_id: str, submit_argv: Sequence[str], script_text: Callable[[], str]) -> List[str]:
        # `--directive "-J 1-2"`: the id is `20[].server`, each subjob `20[i].server` writes its
        # own log and exit file (NAME.o20.i, 157); the range is qsub's `-J X-Y[:Z]` (pbs_job_attributes
        # "array_indices_submitted"), `%N` after it only caps how many run at once
        m = _ARRAY.match(_key(job_id))
        if not m or m.group(2):
            return []
        found = _array_range(list(submit_argv)) or _array_range(directive_words(script_text()))
        suffix = job_id[len(_key(job_id)) :]
        return [f"{m.group(1)}[{i}]{suffix}" for i in found]

    # ---- status ----------------------------------------------------------------------------
    def depend_flags(self, job_id: str) -> List[str]:
        return ["-W", f"depend=afterany:{job_id}"]

    def find_submitted(self, run: Run, script_relpath: str) -> Optional[str]:
        # every job this user may see; ours is the one whose qsub named our (unique) script
        result = run(["qstat", "-f"])
        for job_id, attrs in parse_full(result.out):
            args = attrs.get("Submit_arguments", "").split()
            if args and (args[-1] == script_relpath or args[-1].endswith("/" + script_relpath)):
                return job_id
        return None

    def status_argv(self, job_ids: Sequence[str]) -> List[str]:
        # Text, several ids at once: `-F json` prints only the first job when given several.
        return ["qstat", "-f", "-x"] + list(job_ids)

    def history_unavailable(self, rc: int, out: str, err: str) -> bool:
        """PBS Pro with job history off (its default) answers every `-x` query with rc 0, nothing
        on stdout and this message, even for running jobs; Torque-style qstat rejects -x."""
        text = f"{err}\n{out}".lower()
        if "not configured to maintain job history" in text:
            return True
        return rc != 0 and re.search(r"(unknown|invalid|illegal|unrecognized) option", text) is not None

    def query(self, run: Run, job_ids: Sequence[str]) -> Dict[str, StatusInfo]:
        ids = list(dict.fromkeys(job_ids))
        if not ids:
            return {}
        argv = self.status_argv(ids)
        result = run(argv)
        if self.history_unavailable(result.rc, result.out, result.err or ""):
            # Without -x, finished jobs are `Unknown Job Id` (rc 153): absent from the answer,
            # so the exit-code file decides. Two commands per poll on such sites.
            argv = ["qstat", "-f"] + ids
            result = run(argv)
        known = self.parse_status(result.out, ids)
        err = (result.err or "").strip()
        if result.rc != 0 and not known and err and not self.is_unknown_job_error(err):
            raise SchedulerError(f"{argv[0]} failed: {err.splitlines()[0][:200]}")
        finished_arrays = [j for j, info in known.items() if is_array(j) and info.raw == "F"]
        if finished_arrays:
            known.update(self._array_outcomes(run, finished_arrays, known))
        return known

    def parse_status(self, out: str, job_ids: Iterable[str]) -> Dict[str, StatusInfo]:
        wanted = {_key(j): j for j in job_ids}
        result: Dict[str, StatusInfo] = {}
        blocks = parse_full(out)
        if blocks:
            for job, attrs in blocks:
                if _key(job) in wanted:
                    result[wanted[_key(job)]] = self.job_info(attrs)
        else:  # a table (a site's qstat that ignores -f, or plain Torque)
            for job, (letter, comment) in parse_table(out).items():
                if _key(job) in wanted:
                    result[wanted[_key(job)]] = self.job_info({"job_state": letter, "comment": comment})
        return result

    def job_info(self, attrs: Dict[str, str]) -> StatusInfo:
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
            return StatusInfo(self.exit_state(code), code, letter, comment=comment)
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

    def _array_outcomes(self, run: Run, parents: List[str], known: Dict[str, StatusInfo]) -> Dict[str, StatusInfo]:
        """A finished array is as good as its worst subjob: read them (`qstat -f -x -t`)."""
        result = run(["qstat", "-f", "-x", "-t"] + parents)
        subjobs: Dict[str, List[Tuple[str, StatusInfo]]] = {}
        for job, attrs in parse_full(result.out):
            m = _ARRAY.match(_key(job))
            if m and m.group(2):
                subjobs.setdefault(m.group(1) + "[]", []).append((job, self.job_info(attrs)))
        out = {}
        for parent in parents:
            subs = subjobs.get(_key(parent))
            if subs:
                out[parent] = _array_verdict(known[parent], subs)
        return out

    def exit_state(self, code: int) -> JobState:
        if code == 0:
            return JobState.DONE
        if code == JOB_EXEC_KILL_WALLTIME:
            return JobState.TIMEOUT
        # the script's own code; a kill for another limit (mem, vmem, cput, ncpus: -24..-28);
        # -11 (a non-rerunnable job deleted on requeue); PBS's other start failures (-1..-30);
        # 256 + n, a signal: a qdel only when the substate says so (job_info)
        return JobState.FAILED

    # ---- cancel ----------------------------------------------------------------------------
    def cancel_argv(self, job_id: str) -> List[str]:
        return ["qdel", job_id]

    def parse_cancel(self, rc: int, out: str, err: str) -> CancelOutcome:
        # rc 0, no output: taken, the job ends asynchronously (a running job stayed R for 17 s).
        # rc 35 `qdel: Job has finished 51.pbshead`; rc 153 `qdel: Unknown Job Id ...` (left, or
        # finished with history off): already ended. rc 159 `qdel: Unauthorized Request  ID`.
        text = (err or out or "").strip()
        first = " ".join(text.splitlines()[0].split()) if text else ""
        if rc == 0:
            return CancelOutcome(sent=True, message=first)
        if self.is_unknown_job_error(text):
            return CancelOutcome(sent=False, already_ended=True, message=first)
        return CancelOutcome(sent=False, message=first or f"qdel exited {rc} without a message")

    # ---- names -----------------------------------------------------------------------------
    def job_num(self, job_id: str) -> str:
        """`51` for `51.pbshead`; `16.3` for the subjob `16[3].pbshead` (its log is NAME.o16.3);
        `16` for the array `16[]` (which has no log of its own: each subjob writes one)."""
        seq = _key(job_id)
        m = _ARRAY.match(seq)
        if m:
            return m.group(1) + (f".{m.group(2)}" if m.group(2) else "")
        return seq


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
