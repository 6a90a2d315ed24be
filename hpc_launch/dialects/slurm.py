"""Slurm (any Slurm cluster; the testbed runs a real Slurm 22.05 with slurmdbd).

State words and reasons are squeue(1)'s JOB STATE CODES and JOB REASON CODES, in the long form
(%T, what we ask for) and the compact one (%t, what `squeue` prints by default and psij-python
asks for). sacct(1) prints the same words, with `CANCELLED by UID`, and a `+` when cut short.
"""

from __future__ import annotations

import re
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from .. import protocol
from ..errors import SchedulerError
from .base import (
    Allocation,
    Arrays,
    CancelOutcome,
    ChainHandOff,
    Dialect,
    FailureWording,
    PendingExclusion,
    RestartNotice,
    Run,
    StartEstimate,
    StartEstimates,
    StatusInfo,
    TestSubmission,
    WouldStart,
    flags_of,
    last_matching_line,
)
from .slurm_options import line_options, long_option, short_options
from .slurm_states import (  # state_of, reason_words: also imported from here
    SACCT_FORMAT,
    SQUEUE_FORMAT,
    _array_members,
    exit_status,
    reason_words,
    slurm_time,
    state_of,
)


class Slurm(
    Arrays,
    PendingExclusion,
    StartEstimates,
    TestSubmission,
    FailureWording,
    ChainHandOff,
    RestartNotice,
    Allocation,
    Dialect,
):
    name = "slurm"
    title = "Slurm"
    directive_prefix = "#SBATCH"
    # slurmstepd (req.c: DUE TO TIME LIMIT; task/cgroup: oom-kill events), job states and
    # reasons (job_state_reason.c), sbatch's refusals (slurm_errno.c)
    failure_wording = {
        "walltime": (r"\*\*\* (?:JOB|STEP) \S+ ON \S+ CANCELLED AT \S+ DUE TO TIME LIMIT \*\*\*",),
        # srun (src/api/step_launch.c): a node of the step died under it, or could not be reached
        # when the step started (recorded on the testbed: tests/golden/doctor/slurm-task-launch-failed.log)
        "node_failure": (
            r"srun: error: Node failure on (?P<host>[\w.-]+)",
            r"srun: error: Task launch for StepId=\S+ failed on node (?P<host>[\w.-]+): (?P<why>.*?)\s*$",
        ),
        "host_oom": (r"Detected \d+ oom[-_]kill event", r"OUT_OF_MEMORY", r": task \d+: Out Of Memory"),
        "queue_limit": (
            # the limit's name beats sbatch's generic refusal
            r"(?P<why>QOSMax[A-Za-z]*PerJob[A-Za-z]*Limit|AssocMax[A-Za-z]*PerJob[A-Za-z]*Limit|PartitionTimeLimit|PartitionNodeLimit)",
            r"Batch job submission failed: (?P<why>Requested node configuration is not available"
            r"|Requested time limit is invalid|More processors requested than permitted"
            r"|Node count specification invalid|Job violates accounting/QOS policy"
            r"|Invalid partition name specified)",
        ),
    }
    submit_program = "sbatch"
    test_submit_name = "sbatch --test-only"
    job_id_expr = "${SLURM_JOB_ID:?not inside a Slurm job}"
    job_num_expr = "${SLURM_JOB_ID}"
    nodelist_shell = 'scontrol show hostnames "$SLURM_JOB_NODELIST"'
    nodefile_vars = ("SLURM_JOB_NODELIST",)
    # sbatch's short options (sbatch(1)), so `-t` is known as the `--time` the profiles write
    key_aliases = {"-t": "--time", "-N": "--nodes", "-p": "--partition", "-q": "--qos"}

    def directive_key(self, text: str) -> str:
        """A long option as sbatch reads it: getopt_long takes any unambiguous prefix, so
        `--parti=big` is `--partition=big` and must meet the same checks (an ambiguous one,
        `--nod=1`, sbatch refuses itself). A short option with its value attached (`-pdebug`) or
        after other letters (`-HN9`) is the long option getopt reads it as; `-t 5` keeps its key."""
        head = (text.split() or [""])[0]
        found = short_options(head) if len(head) > 2 else []
        if found:
            return next((key for key, value in found if value is not None), found[-1][0])
        return long_option(super().directive_key(text))

    def directive_keys(self, text: str) -> List[str]:
        """The base's keys, and every option the line's short-option words set (`-HN9999`,
        `-Q -t 99:00:00`): each meets its option's checks (directive_limits.py)."""
        keys = super().directive_keys(text)
        return list(dict.fromkeys(keys + line_options(text)))

    # squeue: `Invalid job id specified`; scancel -v: `Job/step already completing or completed`
    unknown_job_patterns = (r"invalid job id", r"already completing or completed")

    def base_submit_flags(self) -> List[str]:
        # --parsable: the id alone on stdout (`ID` or `ID;cluster`). --open-mode=append: a job Slurm
        # requeues (a node failed under it) runs again into the same log, which sbatch(1) truncates by
        # default: the first run's lines, the evidence of what failed, were lost (seen on the testbed)
        return ["--parsable", "--open-mode=append"]

    def alloc_argv(
        self, directives: Sequence[str], command: Sequence[str], *, submit_flags: Sequence[str] = ()
    ) -> List[str]:
        # salloc takes sbatch's resource options but has no log file, array or requeue (salloc(1));
        # it runs `command` here, on the login node, with the allocation's SLURM_* variables
        batch_only = ("--output", "--error", "--open-mode", "--array", "--requeue", "--no-requeue", "--export")
        return ["salloc", *flags_of(self, directives, batch_only), *submit_flags, *command]

    # ---- arrays: `--array=0-N`; task i is `ID_i` to squeue, sacct and scancel -------------------
    array_index_var = "SLURM_ARRAY_TASK_ID"
    array_first_index = 0
    # each task has a SLURM_JOB_ID of its own, which no one knows at submission: name its files
    # by the array's id and the task's index, as `--output=%A_%a` does
    array_job_num_expr = '"${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}"'

    def array_flags(self, count: int) -> List[str]:
        return [f"--array=0-{count - 1}"]

    def array_task_ids(self, parent_id: str, count: int) -> List[str]:
        return [f"{parent_id}_{i}" for i in range(count)]

    def array_directives(self, lines: Sequence[str]) -> List[str]:
        # %j in an array task is its own job id: the log is %A_%a (array id, task index)
        return [
            re.sub(r"%j", "%A_%a", line) if re.match(r"(--output|--error|-o|-e)\b", line) else line for line in lines
        ]

    def parse_submit(self, out: str) -> str:
        # --parsable: `12345` or `12345;cluster`; plain: `Submitted batch job 12345`, with
        # ` on cluster NAME` under -M (src/sbatch/sbatch.c); site wrappers and Slurm's own FAQ
        # show `sbatch: Submitted batch job 12345`. Only a whole line of one of these counts.
        m = last_matching_line(
            out, r"^(?:(?:sbatch: )?Submitted batch job (\d+)(?: on cluster [\w.-]+)?|(\d+)(?:;[\w.-]+)?)$", "sbatch"
        )
        return m.group(1) or m.group(2)

    def find_submitted(self, run: Run, script_relpath: str) -> Optional[str]:
        # %o is the batch script as sbatch was given it; ours carries a unique time stamp
        result = run(["squeue", "--me", "--noheader", "--states=all", "--format=%i|%o"])
        for line in result.out.splitlines():
            job, _, command = line.strip().partition("|")
            if job.isdigit() and (command == script_relpath or command.endswith("/" + script_relpath)):
                return job
        return None

    # ---- status ----------------------------------------------------------------------------
    def status_argv(self, job_ids: Sequence[str]) -> List[str]:
        # One query for every tracked job; --states=all keeps finished jobs until MinJobAge.
        return ["squeue", "--noheader", "--states=all", f"--format={SQUEUE_FORMAT}", "--jobs=" + ",".join(job_ids)]

    def parse_status(self, out: str, job_ids: Iterable[str]) -> Dict[str, StatusInfo]:
        """`%i|%T|%r` lines (ours); also `squeue -O JobArrayID,StateCompact,Reason` columns."""
        wanted = set(job_ids)
        result: Dict[str, StatusInfo] = {}
        for line in out.splitlines():
            if "|" in line:
                job, word, reason = (line.strip().split("|", 2) + ["", ""])[:3]
            else:
                cols = line.split(None, 2)
                if len(cols) < 2:
                    continue
                job, word, reason = (cols + [""])[:3]
            job = job.strip()
            for one in _array_members(job):  # `12_[0-1,4]`: pending tasks not yet split off
                if one in wanted:
                    result[one] = state_of(word, reason)
        return result

    # ---- when a queued job starts ---------------------------------------------------------------
    @staticmethod
    def start_argv(job_ids: Sequence[str]) -> List[str]:
        # squeue(1) --start: the backfill scheduler's expected start (%S) of pending jobs only.
        # SLURM_TIME_FORMAT=%s (squeue(1) ENVIRONMENT, a strftime format): epoch seconds, not the
        # login node's local time without a zone.
        return [
            "env",
            "SLURM_TIME_FORMAT=%s",
            "squeue",
            "--start",
            "--noheader",
            "--format=%i|%S|%r",
            "--jobs=" + ",".join(job_ids),
        ]

    def start_estimates(self, run: Run, job_ids: Sequence[str]) -> Dict[str, StartEstimate]:
        if not job_ids:
            return {}
        return self.parse_start(run(self.start_argv(job_ids)).out or "", job_ids)

    @staticmethod
    def parse_start(out: str, job_ids: Iterable[str]) -> Dict[str, StartEstimate]:
        """`%i|%S|%r` lines: %S is epoch seconds (ours), `2026-11-26T03:00:39` (the default,
        read as this machine's local time) or `N/A` (not estimated yet)."""
        wanted = set(job_ids)
        result: Dict[str, StartEstimate] = {}
        for line in out.splitlines():
            job, start, reason = (line.strip().split("|", 2) + ["", ""])[:3]
            at = slurm_time(start)
            for one in _array_members(job.strip()):
                if one in wanted:
                    result[one] = StartEstimate(at, reason_words(reason))
        return result

    # ---- before submitting: sbatch --test-only ---------------------------------------------------
    def test_submit_argv(self, script_path: str, *, submit_flags: Sequence[str] = ()) -> List[str]:
        # sbatch(1) --test-only: "validate the batch script and return an estimate of when a job
        # would be scheduled to run ... The job is not actually submitted". SLURM_TIME_FORMAT=%s
        # (honoured by sbatch 22.05 on the testbed): epoch seconds, not local time without a zone.
        return ["env", "SLURM_TIME_FORMAT=%s", self.submit_program, "--test-only", *submit_flags, script_path]

    def parse_test_submit(self, rc: int, out: str, err: str) -> WouldStart:
        # on stderr (recorded: tests/golden/sched/slurm_sbatch_test_only_*): `sbatch: Job 339 to start
        # at 1795663664 using 2 processors on nodes pod[1-2] in partition debug`, exit 0; a job that
        # cannot be queued as asked: `allocation failure: Node count specification invalid`, exit 1
        text = f"{out}\n{err}"
        m = re.search(r"Job \d+ to start at (\S+) using \d+ processors on nodes (\S+) in partition (\S+)", text)
        if rc == 0 and m:
            return WouldStart(at=slurm_time(m.group(1)), hosts=m.group(2), queue=m.group(3))
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        if rc == 0 or not lines:
            shown = " | ".join(lines)[:200] or "(nothing)"
            raise SchedulerError(f"cannot read sbatch --test-only's answer (exit {rc}): {shown}")
        why = re.sub(r"^(?:sbatch: error: )?(?:Batch job submission failed: |allocation failure: )?", "", lines[-1])
        return WouldStart(error=why)

    def accounting(self, run: Run, job_id: str) -> Optional[StatusInfo]:
        """sacct's record of a job squeue has forgotten (after MinJobAge). None without
        accounting (`sacct` refuses or prints nothing) or without a record of the job."""
        result = run(self.accounting_argv(job_id))
        if result.rc != 0:
            return None
        return self.parse_accounting(result.out, job_id)

    @staticmethod
    def accounting_argv(job_id: str) -> List[str]:
        # -X: the allocation only, not its steps; with -j the time window starts at the epoch
        return ["sacct", "--noheader", "--parsable2", "--allocations", f"--format={SACCT_FORMAT}", "--jobs=" + job_id]

    @staticmethod
    def parse_accounting(out: str, job_id: str) -> Optional[StatusInfo]:
        """`sacct --parsable2` lines in SACCT_FORMAT order, or under a `JobID|...|State|...`
        header in any order (--parsable adds a trailing `|`). Steps (`14.batch`), array tasks
        (`14_2`) and heterogeneous components (`14+0`) are not the job: no verdict from them."""
        names = SACCT_FORMAT.split(",")
        rows = []
        for line in out.splitlines():
            cols = [c.strip() for c in line.split("|")]
            if cols[0] == "JobID":
                names = cols
            elif cols[0] == job_id:
                rows.append(dict(zip(names, cols)))
        if not rows:
            return None
        row = rows[-1]  # a requeued job: the latest record
        info = state_of(row.get("State", ""))
        return StatusInfo(
            info.state,
            exit_status(row.get("ExitCode", "")),
            info.raw or "sacct",
            comment=info.comment,
            never_runs=info.never_runs,
        )

    # ---- cancel ----------------------------------------------------------------------------
    def cancel_argv(self, job_id: str) -> List[str]:
        # scancel exits 0 and prints nothing for a job that had already ended or is unknown;
        # -v makes it say so (`Kill job error on job id N: Job/step already completing or
        # completed`, `... Invalid job id specified`), still with exit status 0.
        return ["scancel", "-v", job_id]

    def exclude_flags(self, hosts: Sequence[str]) -> List[str]:
        return [f"--exclude={','.join(hosts)}"] if hosts else []  # sbatch(1) -x, --exclude=<node_name_list>

    def exclude_pending_argv(self, job_id: str, hosts: Sequence[str]) -> Optional[List[str]]:
        # scontrol(1) update: ExcNodeList of a pending job (replaces the list: give all of them)
        return ["scontrol", "update", f"JobId={job_id}", f"ExcNodeList={','.join(hosts)}"] if hosts else None

    def depend_flags(self, job_id: str) -> List[str]:
        return [f"--dependency=afterany:{job_id}"]

    # A job Slurm requeued (JobRequeue=1, the default: a node failed under it, or `scontrol requeue`)
    # runs this script again, SLURM_RESTART_COUNT > 0, on nodes that answer. Each run notes its nodes
    # beside the log; a node of the run before that Slurm now holds down or not responding is the one
    # that failed (sinfo -t; `down*`, reason `Not responding`, seen on the testbed). Not sacct -D
    # (`NODE_FAIL|pod[1-2]`): a compute node need not reach the accounting daemon (the testbed's cannot).
    restarted_shell = r"""hpc_launch_ran_on="$HPC_LAUNCH_LOG.nodes"
if [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ]; then
  echo "[hpc-launch] run $((SLURM_RESTART_COUNT + 1)) of job $SLURM_JOB_ID: Slurm requeued it"
  if [ -s "$hpc_launch_ran_on" ]; then
    hpc_launch_before=$(cat "$hpc_launch_ran_on")
    sinfo -h -N -n "$hpc_launch_before" -t down,drain,fail,no_respond -o '%N|%T|%E' 2>/dev/null | sort -u |
      while IFS='|' read -r hpc_launch_node hpc_launch_state hpc_launch_why; do
        hpc_launch_held="Slurm holds it $hpc_launch_state: $hpc_launch_why"
        hpc_launch_why="node failure under the run before (on $hpc_launch_before; $hpc_launch_held)"
        echo "{prefix}$hpc_launch_node: $hpc_launch_why"
        printf '%s\t%s\n' "$hpc_launch_node" "$hpc_launch_why" >>"$HPC_LAUNCH_BAD_HOSTS"
      done
  fi
fi
echo "${SLURM_JOB_NODELIST:-}" >"$hpc_launch_ran_on"  # for the run after this one, if any""".replace(
        "{prefix}", protocol.BAD_HOST_PREFIX
    )

    # A preempted job (PreemptMode=REQUEUE with a GraceTime) gets SIGTERM in its steps' tasks, not in
    # the batch script, and is requeued when the grace runs out. Its ranks that save on the signal
    # and exit inside the grace end the script early, and Slurm then ends the job COMPLETED (or FAILED),
    # never requeued (Slurm 22.05 on the testbed): the script asks for the requeue itself while Slurm
    # still says RUNNING with a PreemptTime (scontrol(1) show job). Not a cancelled job (CANCELLED or
    # COMPLETING by then), nor one that ran out its grace (Slurm requeues that itself).
    preempted_shell = r"""hpc_launch_requeue_if_preempted() {
  local job when
  job=$(scontrol -o show job "$SLURM_JOB_ID" 2>/dev/null) || return 0
  case $job in *" JobState=RUNNING "*) ;; *) return 0 ;; esac
  when=${job##* PreemptTime=}
  case $when in [0-9]*) when=${when%% *} ;; *) return 0 ;; esac
  if scontrol requeue "$SLURM_JOB_ID"; then
    echo "{prefix}$when: Slurm requeues job $SLURM_JOB_ID (its next run resumes from what this one saved)"
  else
    echo "{prefix}$when, and Slurm would not requeue job $SLURM_JOB_ID (submitted with --no-requeue?)" >&2
  fi
}""".replace("{prefix}", protocol.PREEMPTED_PREFIX)

    # The next link of a chain starts the moment this one's script exits (afterany), with no
    # launcher around to move it: the ending link itself keeps it off the hosts it found bad.
    # squeue -o: %E the dependency (`afterany:41(unfulfilled)`), %x the hosts already excluded
    # (`(null)` when none; ExcNodeList replaces the list, so they are kept).
    keep_dependents_off_shell = r"""hpc_launch_keep_next_links_off() {
  local bad next dep old hosts
  bad=$(cut -f1 "$1" | sort -u | paste -sd, -)
  [ -n "$bad" ] || return 0
  squeue -h -u "$(id -un)" -t PD -o '%i %E' 2>/dev/null | while read -r next dep; do
    case $dep in *":$SLURM_JOB_ID("*) ;; *) continue ;; esac
    old=$(squeue -h -j "$next" -o %x 2>/dev/null)
    case $old in "(null)" | *" "*) old="" ;; esac
    hosts=$(scontrol show hostnames "${old:+$old,}$bad" | sort -u | paste -sd, -)
    if scontrol update JobId="$next" ExcNodeList="$hosts"; then
      echo "{prefix}$hosts: job $next"
    fi
  done
}""".replace("{prefix}", protocol.KEPT_OFF_PREFIX)

    def parse_cancel(self, rc: int, out: str, err: str) -> CancelOutcome:
        text = f"{err or ''}\n{out or ''}".strip()
        problems = [line.strip() for line in text.splitlines() if "error" in line.lower()]
        if problems:
            first = problems[0]
            if self.is_unknown_job_error(first):
                return CancelOutcome(sent=False, already_ended=True, message=first)
            return CancelOutcome(sent=False, message=first)
        if rc == 0:
            return CancelOutcome(sent=True, message=text.splitlines()[0] if text else "")
        return CancelOutcome(
            sent=False, message=text.splitlines()[0] if text else f"scancel exited {rc} without a message"
        )

    # ---- inside the job ----------------------------------------------------------------------
    def nodes_from_env(self, env: Mapping[str, str]) -> Optional[Tuple[str, Dict[str, int]]]:
        """SLURM_JOB_NODELIST is a hostlist (`n[1-3],gpu07`), not a file."""
        from ..nodelist import count_hosts, expand_slurm_nodelist

        value = env.get("SLURM_JOB_NODELIST")
        if not value:
            return None
        return "$SLURM_JOB_NODELIST", count_hosts(expand_slurm_nodelist(value), f"$SLURM_JOB_NODELIST ({value[:80]})")
