"""What every scheduler dialect provides: the contract. Everything scheduler-specific lives on
its dialect (one module per scheduler), nothing of it anywhere else.

A dialect is stateless and never holds a connection: the job's life (`hpc_launch/jobs/`) hands
it a `run(argv)` callable that executes a command where the scheduler is and returns an object
with `rc`, `out` and `err`. It never raises for a job that is merely gone; it raises
SchedulerError only for an answer it cannot read. The contract, hook by hook, is on `Dialect`;
what answers are read into is `answers.py`, what only some schedulers can do `capabilities.py`
(both re-exported here).
"""

from __future__ import annotations

import abc
import re
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from ..errors import SchedulerError
from ..states import JobState
from .answers import (
    TRANSIENT_PATTERNS,
    UNKNOWN_JOB_PATTERNS,
    CancelOutcome,
    Run,
    StartEstimate,
    StatusInfo,
    WouldStart,
)
from .capabilities import (
    CAPABILITIES,
    Allocation,
    Arrays,
    ChainHandOff,
    FailureWording,
    HostExclusion,
    NodeListCommand,
    PendingExclusion,
    RestartNotice,
    StartEstimates,
    TestSubmission,
    scheduler_words,
)

__all__ = [  # the answers and the capabilities are the contract's too: dialects import them from here
    "CAPABILITIES",
    "TRANSIENT_PATTERNS",
    "UNKNOWN_JOB_PATTERNS",
    "Allocation",
    "Arrays",
    "CancelOutcome",
    "ChainHandOff",
    "Dialect",
    "FailureWording",
    "HostExclusion",
    "NodeListCommand",
    "PendingExclusion",
    "RestartNotice",
    "Run",
    "StartEstimate",
    "StartEstimates",
    "StatusInfo",
    "TestSubmission",
    "WouldStart",
    "flags_of",
    "last_matching_line",
    "scheduler_words",
    "with_site_commands",
]


class Dialect(abc.ABC):
    """One scheduler's dialect. Adding a scheduler = one module with a subclass, one line in the
    registry (`dialects/__init__.py`, or an `hpc_launch.dialects` entry point), and a profile that
    names it (docs/architecture.md, "Adding a scheduler").

    Required (abstract: a subclass that lacks one cannot be made):
      `parse_submit(out)` -> the job id the submit command printed, or SchedulerError.
      `status_argv(ids)` + `parse_status(out, ids)`: ONE command for all of a cluster's jobs and
      its answer -> {id: StatusInfo} for the ids the scheduler still knows (a missing id means
      "forgotten", never an error). `query` wraps them; override it for fallbacks.
      `cancel_argv(id)`: the command that cancels a job.
      `depend_flags(id)`: submit flags that hold a job until job `id` has ended, however it ended
      (how a chain link names its predecessor; never by a word's position).
    Plus the attributes `name`, `title`, `directive_prefix`, `submit_program`, `job_id_expr` /
    `job_num_expr` (shell, valid inside the job), `nodelist_shell` and `nodefile_vars`.

    Optional, with an answer that is right for a scheduler that has nothing more to say:
      rendering: `template`, `directive_key()` / `keyed_flags` / `key_aliases` (which user
      directive replaces which default: PBS honours the FIRST of two, so there are never two);
      submitting (hpc_launch/jobs/placing.py): `submit_argv(script_path, submit_flags,
      depend_on=...)` -> the whole command, run in the job's work dir; the script reaches the
      scheduler as the argument `script_path` or, when `script_on_stdin` is True (LSF's
      `bsub < script`), on the command's standard input and not in argv. `submit_flags(name)`,
      `base_submit_flags()`, `is_transient(err)`: a refusal that created nothing and says "try
      later" (retried); `find_submitted(run, script_relpath)`: after an unclear failure, the id of
      the job this submission created (None: none found);
      reading state (hpc_launch/jobs/state.py): `query_jobs`, `accounting(run, id)` (None: no
      record), `log_verdict(log_tail)` (None: no kill line), `exit_state(code)`,
      `user_array_tasks(id, submit_argv, script_text)` ([]: not an array the user made);
      cancelling: `parse_cancel(rc, out, err)` -> CancelOutcome;
      inside a job: `nodes_from_env(env)` -> (source, host -> slots) or None.

    Capabilities: what only some schedulers can do is a mixin class below, listed in
    `CAPABILITIES`. A dialect that can, inherits it (`class Slurm(Arrays, ..., Dialect)`) and
    implements its hooks; code asks `dialect.supports(Arrays)`, never a sentinel value:
      `Arrays` (job arrays: one task per sweep point), `HostExclusion` / `PendingExclusion`
      (keep a job, or a job that waits, off hosts), `StartEstimates` (when a queued job starts),
      `TestSubmission` (validate a job without queueing it), `FailureWording` (the scheduler's own
      words for doctor's causes), `ChainHandOff` (an ending chain link keeps the next off bad
      hosts), `RestartNotice` (a job the scheduler restarted says so), `NodeListCommand` (the
      node list comes from a command, Flux's `flux hostlist`), `Allocation` (an interactive
      allocation through the scheduler's own command: `alloc_argv`, for `hpc-launch alloc`).
    """

    name: str = ""
    title: str = ""  # for docs and `clusters`
    has_scheduler = True  # False: no scheduler, the script runs as a background process group
    template = "script.sh.j2"  # the header (shebang + directive block); the body is shared
    directive_prefix: str = ""
    submit_program: str = ""
    # Shell expressions, valid inside the job, for the job id and its numeric part.
    job_id_expr: str = ""
    job_num_expr: str = ""
    # How to get the job's node list in plain shell when `hpc-launch hostfile` is not on the node.
    nodelist_shell: str = ""
    # Environment variables that name the node list inside a job, in detection order.
    nodefile_vars: Tuple[str, ...] = ()
    unknown_job_patterns: Sequence[str] = UNKNOWN_JOB_PATTERNS
    # The script is fed on the submit command's standard input, not named in argv (LSF's `bsub <`).
    script_on_stdin = False
    # Directive flags whose first word is keyed by the resource it sets (`-l walltime=...`):
    # a user's `-l walltime=` replaces the default `-l walltime=`, not every `-l`.
    keyed_flags: Tuple[str, ...] = ()
    # Other spellings of a directive key the scheduler takes for the same setting -> the key as
    # profiles write it (Slurm's `-t` is `--time`): a user line is known by what it sets.
    key_aliases: Mapping[str, str] = {}

    def supports(self, capability: type) -> bool:
        """Whether this scheduler has `capability` (one of `CAPABILITIES`)."""
        return isinstance(self, capability)

    # ---- directives ----------------------------------------------------------------------
    def directive_key(self, text: str) -> str:
        """The part of a directive that identifies it, so a user line replaces a default one."""
        tokens = text.split()
        if not tokens:
            return ""
        head = tokens[0]
        if head.startswith("--") and "=" in head:
            return head.split("=", 1)[0]
        if len(tokens) > 1 and head in self.keyed_flags:
            return f"{head} {re.split(r'[=:]', tokens[1], maxsplit=1)[0]}"
        return head

    def directive_keys(self, text: str) -> List[str]:
        """Every key a directive line sets, spelt as profiles spell it: a keyed flag may list
        several resources (`-l place=scatter,walltime=9:00:00`), an option may have other names."""
        tokens = text.split()
        parts = [text]
        if len(tokens) == 2 and tokens[0] in self.keyed_flags:
            parts = [f"{tokens[0]} {item}" for item in tokens[1].split(",") if item] or parts
        keys = [self.directive_key(part) for part in parts]
        return [self.key_aliases.get(key, key) for key in keys]

    def merge_directives(self, defaults: Sequence[str], overrides: Sequence[str]) -> List[str]:
        """Defaults with user lines replacing same-key ones in place; new keys appended.

        PBS Pro honours the FIRST of two conflicting directives, so appending a user line after
        a default would silently lose it: we never emit two lines with the same key.
        """
        out = list(defaults)
        for line in overrides:
            key = self.directive_key(line)
            for i, existing in enumerate(out):
                if self.directive_key(existing) == key:
                    out[i] = line
                    break
            else:
                out.append(line)
        return out

    # ---- submit ----------------------------------------------------------------------------
    def submit_flags(self, name: str) -> List[str]:
        """Flags this dialect always puts on the submit command line (besides the profile's)."""
        return []

    def submit_argv(
        self,
        script_path: str,
        *,
        submit_flags: Sequence[str] = (),
        program: Optional[Sequence[str]] = None,
        log_prefix: str = "",
        depend_on: Optional[str] = None,
    ) -> List[str]:
        """The submit command; `depend_on`: hold the job until that job has ended (a chain)."""
        return (
            list(program or [self.submit_program])
            + self.base_submit_flags()
            + list(submit_flags)
            + self.held_flags(depend_on)
            + self.script_args(script_path)
        )

    def base_submit_flags(self) -> List[str]:
        """Flags that come first on every submit command of this scheduler (Slurm's --parsable)."""
        return []

    def held_flags(self, depend_on: Optional[str]) -> List[str]:
        return self.depend_flags(depend_on) if depend_on else []

    def script_args(self, script_path: str) -> List[str]:
        return [] if self.script_on_stdin else [script_path]

    @abc.abstractmethod
    def parse_submit(self, out: str) -> str:
        """The job id in the submit command's output; SchedulerError when there is none (use
        `last_matching_line`: only a whole line of the scheduler's own form counts)."""

    def find_submitted(self, run: Run, script_relpath: str) -> Optional[str]:
        """The id of the job whose script is `script_relpath` (unique: it carries a time stamp),
        when a submission may have created a job without saying so (a timeout, a lost
        connection). None: no such job, or this scheduler cannot tell."""
        return None

    @abc.abstractmethod
    def depend_flags(self, job_id: str) -> List[str]:
        """Submit flags that hold a job until `job_id` has ended, however it ended (chains)."""

    def is_transient(self, err: str) -> bool:
        low = err.lower()
        return any(re.search(p, low) for p in TRANSIENT_PATTERNS)

    # ---- status ----------------------------------------------------------------------------
    @abc.abstractmethod
    def status_argv(self, job_ids: Sequence[str]) -> List[str]:
        """ONE command that asks the scheduler about all of these jobs (finished ones too, where
        it keeps them)."""

    @abc.abstractmethod
    def parse_status(self, out: str, job_ids: Iterable[str]) -> Dict[str, StatusInfo]:
        """Jobs the scheduler still knows; a job missing from the result has left the scheduler.
        A word the scheduler does not document is JobState.UNKNOWN: it never ends a job."""

    def is_unknown_job_error(self, err: str) -> bool:
        low = err.lower()
        return any(re.search(p, low) for p in self.unknown_job_patterns)

    def query(self, run: Run, job_ids: Sequence[str]) -> Dict[str, StatusInfo]:
        """What the scheduler knows of these jobs, with this dialect's fallbacks. A job absent
        from the answer has left the scheduler: the exit-code file (then `accounting`) decides.
        Raises SchedulerError only when the scheduler could not be asked at all."""
        argv = self.status_argv(job_ids)
        result = run(argv)
        known = self.parse_status(result.out, job_ids)
        err = (result.err or "").strip()
        if result.rc != 0 and not known and err and not self.is_unknown_job_error(err):
            raise SchedulerError(f"{argv[0]} failed: {err.splitlines()[0][:200]}")
        return known

    def query_jobs(self, run: Run, jobs: Mapping[str, str]) -> Dict[str, StatusInfo]:
        """`query` for jobs given as {job id: the job script's file name}: the name is the job's
        identity where an id can be reused while we track it (a local pid)."""
        return self.query(run, list(jobs))

    def accounting(self, run: Run, job_id: str) -> Optional[StatusInfo]:
        """How a job that left the scheduler ended, from the scheduler's records (qacct, sacct),
        asked only when the job left no exit-code file. None: no such record."""
        return None

    def log_verdict(self, log_tail: str) -> Optional[StatusInfo]:
        """How the job ended, from the line the scheduler writes into the job's log when it kills
        it for a limit (walltime, memory). Asked when the job was killed by a signal and the
        scheduler no longer says why. None: no such line."""
        return None

    def exit_state(self, code: int) -> JobState:
        """What the scheduler's exit status for a finished job means."""
        return JobState.DONE if code == 0 else JobState.FAILED

    def user_array_tasks(self, job_id: str, submit_argv: Sequence[str], script_text: Callable[[], str]) -> List[str]:
        """The task ids of a job the user made an array with their own flag or directive (its id is
        the array's, its tasks write the logs and exit files): [] for any other job. Default: none
        (only schedulers whose array has an id of its own answer; `script_text` is read lazily)."""
        return []

    # ---- cancel ----------------------------------------------------------------------------
    @abc.abstractmethod
    def cancel_argv(self, job_id: str) -> List[str]:
        """The command that cancels `job_id` (its answer is read by `parse_cancel`)."""

    def parse_cancel(self, rc: int, out: str, err: str) -> CancelOutcome:
        text = (err or out or "").strip()
        first = text.splitlines()[0] if text else ""
        if rc == 0:
            return CancelOutcome(sent=True, message=first)
        if self.is_unknown_job_error(text):
            return CancelOutcome(sent=False, already_ended=True, message=first)
        return CancelOutcome(sent=False, message=first or f"exit code {rc}")

    # ---- inside the job ----------------------------------------------------------------------
    def nodes_from_env(self, env: Mapping[str, str]) -> Optional[Tuple[str, Dict[str, int]]]:
        """(source, host -> slots) from this scheduler's node list, or None when not in its job."""
        from ..nodelist import count_host_text, read_node_file

        for var in self.nodefile_vars:
            if env.get(var):
                return f"${var}", count_host_text(read_node_file(env[var], f"${var}"), f"${var} ({env[var]})")
        return None

    # ---- names -----------------------------------------------------------------------------
    def job_num(self, job_id: str) -> str:
        """The numeric part used in log names (12345 for 12345.pbs1)."""
        return job_id.split(".", 1)[0]


def flags_of(dialect: Dialect, directives: Sequence[str], batch_only: Sequence[str]) -> List[str]:
    """Directive lines as command-line flags (the allocation commands take the batch directives'
    options), without those only a batch job has (its log file, arrays): `alloc_argv`'s helper."""
    import shlex

    flags: List[str] = []
    for line in directives:
        if dialect.directive_key(line) not in batch_only:
            flags += shlex.split(line)
    return flags


def with_site_commands(argv: Sequence[str], commands: Dict[str, str]) -> List[str]:
    """Swap the scheduler program for the site's name of it (the first argv item it names)."""
    out = list(argv)
    for i, item in enumerate(out):
        if item in commands:
            out[i] = commands[item]
            break
    return out


def last_matching_line(out: str, pattern: str, what: str) -> re.Match:
    for line in reversed(out.strip().splitlines()):
        m = re.search(pattern, line.strip())
        if m:
            return m
    shown = out.strip().replace("\n", " | ")[:200] or "(nothing)"
    raise SchedulerError(
        f"could not find the job id in the {what} output: {shown}",
        hint="the submit may have failed; check `hpc-launch list` before retrying",
    )
