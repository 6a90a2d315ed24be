"""PBS Professional (ABCI 3.0, Miyabi, Polaris), as a real OpenPBS 23.06 server behaves
(tests/golden/pbspro-observed, with its RECORDING.md). Also drives Slurm's Torque-style
qsub/qstat/qdel wrappers (the testbed), which have no `qstat -x`, no substates and bare ids.

How a job ended is read in pbspro_endings.py, what qstat prints in pbspro_qstat.py (both with
OpenPBS's own numbers and words: src/include/job.h, src/server/svr_jobfunc.c).
"""

from __future__ import annotations

import re
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
from .pbspro_endings import _array_verdict, exit_state, job_info, kill_reason
from .pbspro_qstat import _ARRAY, _array_range, _key, directive_words, is_array, parse_full, parse_table, variable_list

__all__ = ["PBSPro", "is_array", "kill_reason", "parse_full", "parse_table", "variable_list"]  # read here by tests


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
        return job_info(attrs)

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
        return exit_state(code)

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
