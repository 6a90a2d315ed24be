"""The capabilities: what only some schedulers can do, each a mixin a dialect inherits before
`Dialect` (`class Lsf(Arrays, HostExclusion, Dialect)`), asked by `dialect.supports(...)`.
Its abstract hooks must then be given. A new optional hook is one more class here and one more
entry in CAPABILITIES."""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Dict, List, Mapping, Optional, Sequence, Tuple

from ..errors import HostfileError
from .answers import Run, StartEstimate, WouldStart

if TYPE_CHECKING:
    from .base import Dialect


class Arrays(abc.ABC):
    """Job arrays: one submission, one task per sweep point (without: a job per point)."""

    # The variable holding a task's index inside an array job.
    array_index_var: str = ""
    array_first_index: int = 1
    # JOB_NUM inside an array task (log, exit-code file and hostfile names).
    array_job_num_expr: str = ""

    @abc.abstractmethod
    def array_flags(self, count: int) -> List[str]:
        """Submit flags that make the job an array of `count` tasks."""

    @abc.abstractmethod
    def array_task_ids(self, parent_id: str, count: int) -> List[str]:
        """The id of each task (in index order), as status and cancel take it."""

    def array_directives(self, lines: Sequence[str]) -> List[str]:
        """Directive lines of an array job (where a task's log name must differ from the job's)."""
        return list(lines)


class HostExclusion(abc.ABC):
    """A job can be kept off named hosts when it is submitted (without: --spares)."""

    @abc.abstractmethod
    def exclude_flags(self, hosts: Sequence[str]) -> List[str]:
        """Submit flags that keep the job off `hosts` ([] for no hosts)."""


class PendingExclusion(HostExclusion):
    """A job that has not started yet can be moved off hosts (the later links of a chain, once an
    earlier one found them bad)."""

    @abc.abstractmethod
    def exclude_pending_argv(self, job_id: str, hosts: Sequence[str]) -> Optional[List[str]]:
        """A command that keeps the waiting job `job_id` off `hosts` (None for no hosts)."""


class StartEstimates:
    """The scheduler says when a queued job will start: in its status answer
    (`StatusInfo.estimated_start`) or through `start_estimates`. Without it `status` says
    "no estimate from <title>", never a guess."""

    def start_estimates(self, run: Run, job_ids: Sequence[str]) -> Dict[str, StartEstimate]:
        """{id: StartEstimate} for these queued jobs, in one command; a job missing from the
        answer has no estimate. Never raises for an answer it cannot read: an estimate is a
        courtesy, it never stops a refresh. Default: the status answer carries them."""
        return {}


class TestSubmission(abc.ABC):
    """The scheduler validates a job without queueing it (Slurm `sbatch --test-only`, Grid Engine
    `qsub -w v`): `where` asks it, `submit` runs it first (`where.check_before_submit`).
    Without it `where` says "no estimate without submitting" and `submit` queues unchecked."""

    __test__ = False  # not a pytest test class, whatever its name
    test_submit_name: str = ""  # the command, as messages name it

    @abc.abstractmethod
    def test_submit_argv(self, script_path: str, *, submit_flags: Sequence[str] = ()) -> List[str]:
        """A command that validates the job in `script_path` without queueing it, and says when
        it would start where the scheduler can."""

    @abc.abstractmethod
    def parse_test_submit(self, rc: int, out: str, err: str) -> WouldStart:
        """Its answer -> WouldStart (`error`: the scheduler's refusal, one line); SchedulerError
        for an answer it cannot read."""


class FailureWording:
    """The scheduler's own words for doctor's causes (hpc_launch/doctor/causes.py): its walltime
    or memory kill, a queue-limit refusal, a node that failed (`(?P<host>...)`)."""

    # cause key (doctor.CAUSES) -> this scheduler's own words for it, as regexes (re.M)
    failure_wording: Mapping[str, Tuple[str, ...]] = {}


class ChainHandOff:
    """A chain link, as it ends, keeps the links waiting for it off the hosts it found bad."""

    # A bash function: keeps the jobs waiting for this one off the hosts in the bad-hosts file
    # named by its $1 and prints a `protocol.KEPT_OFF_PREFIX` line per job changed.
    keep_dependents_off_shell: str = ""


class RestartNotice:
    """A job the scheduler restarted by itself says so at its start."""

    # Shell run at the start of every job: says so when restarted, and reports the hosts that
    # failed under the earlier run to $HPC_LAUNCH_BAD_HOSTS.
    restarted_shell: str = ""
    # A bash function `hpc_launch_requeue_if_preempted`, called as the script exits: a run the
    # scheduler preempted whose script ended inside the grace time (its ranks saved on the signal
    # and exited) asks the scheduler for the requeue the site configured.
    preempted_shell: str = ""


class Allocation(abc.ABC):
    """An interactive allocation through the scheduler's own command (`hpc-launch alloc`)."""

    @abc.abstractmethod
    def alloc_argv(
        self, directives: Sequence[str], command: Sequence[str], *, submit_flags: Sequence[str] = ()
    ) -> List[str]:
        """The scheduler's own command for an interactive allocation with the job's resources (its
        directive lines, without the prefix, and its submit flags) that runs `command` inside it,
        on the terminal, and gives the allocation back when `command` exits (Slurm `salloc`, PBS
        `qsub -I`, Grid Engine `qrsh`; no scheduler: `command` itself)."""


class NodeListCommand(abc.ABC):
    """The job's node list comes from a command run inside the job, not from a variable or a file
    (Flux: `flux hostlist local`). `hpc-launch hostfile` runs it when `nodes_from_env` finds none."""

    @abc.abstractmethod
    def nodelist_argv(self, env: Mapping[str, str]) -> Optional[List[str]]:
        """The command that prints this job's node list, or None when `env` is not one of this
        scheduler's jobs."""

    def parse_nodelist(self, out: str, source: str) -> Dict[str, int]:
        """The command's output -> host -> slots (by default read as a node file is)."""
        from ..nodelist import count_host_text

        return count_host_text(out, source)

    def nodes_from_command(self, env: Mapping[str, str]) -> Optional[Tuple[str, Dict[str, int]]]:
        """(source, host -> slots) from `nodelist_argv`'s output; None when not in such a job."""
        import subprocess

        argv = self.nodelist_argv(env)
        if argv is None:
            return None
        source = f"`{' '.join(argv)}`"
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=dict(env))
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise HostfileError(f"cannot read the node list: {source} failed: {exc}") from None
        if done.returncode != 0:
            said = (done.stderr or done.stdout).strip().splitlines()
            raise HostfileError(f"{source} exited {done.returncode}: {said[-1][:200] if said else 'no message'}")
        return source, self.parse_nodelist(done.stdout, source)


# Every capability, for the contract test and the docs. One more optional hook: one more entry.
CAPABILITIES: Tuple[type, ...] = (
    Arrays,
    HostExclusion,
    PendingExclusion,
    StartEstimates,
    TestSubmission,
    FailureWording,
    ChainHandOff,
    RestartNotice,
    NodeListCommand,
    Allocation,
)


def scheduler_words(dialect: Dialect, key: str) -> Tuple[str, ...]:
    """The dialect's own wording (regexes) for doctor's cause `key`; () when it has none."""
    return tuple(dialect.failure_wording.get(key, ())) if isinstance(dialect, FailureWording) else ()
