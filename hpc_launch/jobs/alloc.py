"""Inside one allocation: `hpc-launch alloc` asks the scheduler for an interactive allocation
(its own command: salloc, qsub -I, qrsh) and opens a shell in it; `hpc-launch run` inside starts
the training on the allocation's nodes with the site's launcher, with no new queue wait.

The allocation is recorded like a job (its scheduler id, `list`, `cancel`). The scheduler runs a
small wrapper script inside it, which names the allocation in a file (so it is recorded the moment
it starts), exports HPC_LAUNCH_ALLOC for `run`, opens the shell, and writes the exit-code file
when the shell leaves. A run is the job script rendered for the allocation, run directly in its
own session (recorded as a job with no scheduler: its id is that session's, its log its own).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Tuple, cast

import msgspec
from msgspec.structs import replace

from .. import dialects, secrets
from ..errors import SpecError
from ..protocol import EXIT_FILE_SUFFIX, EXIT_SIGINT, LIVE_LOG_SUFFIX, LOCAL_HOST
from ..records import JobRecord, JobStore
from ..states import JobState
from ..transport.base import Transport
from .connect import transport_for
from .placing import add_or_explain, opened, placed, record_for

if TYPE_CHECKING:
    from ..prepare import Prepared

ALLOC_ENV = "HPC_LAUNCH_ALLOC"  # the allocation's job id, exported into its shell by the wrapper
ALLOC_CLUSTER_ENV = "HPC_LAUNCH_ALLOC_CLUSTER"
ALLOC_KEY = "alloc"  # record.extra of an allocation: what `run` renders from
RUN_KEY = "run_of"  # record.extra of a run: {"cluster": ..., "job_id": ...} of its allocation
ID_SUFFIX = ".alloc-id"  # beside the wrapper: the allocation's id, written by the wrapper inside it
RECORDED_SUFFIX = ".recorded"  # beside the id: `alloc` has recorded the allocation, the shell may open
ENDING_POLLS = 10  # seconds the scheduler may take to say an allocation whose shell left has ended
# hpc-launch's own settings that the allocation's shell keeps (qrsh and qsub -I pass no environment)
CARRIED = ("HPC_LAUNCH_STATE_DIR", "HPC_LAUNCH_CONFIG_DIR", "HPC_LAUNCH_CLUSTERS_DIR")

# The scheduler's own variables inside its job, in the order they are trusted: (dialect, id var,
# the variable that must be set beside it). PBS and Grid Engine names are generic words, so their
# node file must be there too (Slurm's PBS wrappers set PBS_JOBID as well: Slurm is asked first).
SCHEDULER_ENV: Tuple[Tuple[str, str, str], ...] = (
    ("slurm", "SLURM_JOB_ID", "SLURM_JOB_NODELIST"),
    ("pbspro", "PBS_JOBID", "PBS_NODEFILE"),
    ("gridengine", "JOB_ID", "PE_HOSTFILE"),
    ("cobalt", "COBALT_JOBID", "COBALT_NODEFILE"),
)


class Inside(msgspec.Struct, frozen=True):
    """The allocation this shell is in, as its environment says."""

    job_id: str
    source: str  # the variable that said so
    dialect: Optional[str] = None  # the scheduler whose variables said so; None: hpc-launch's own
    cluster: Optional[str] = None


def detect(env: Mapping[str, str]) -> Optional[Inside]:
    """The allocation `env` is inside: the one `alloc` opened (HPC_LAUNCH_ALLOC), else a
    scheduler's job by its own variables; None outside any."""
    if env.get(ALLOC_ENV):
        return Inside(env[ALLOC_ENV], ALLOC_ENV, cluster=env.get(ALLOC_CLUSTER_ENV) or None)
    for dialect, id_var, beside in SCHEDULER_ENV:
        if env.get(id_var) and env.get(beside):
            return Inside(env[id_var], id_var, dialect=dialect)
    return None


# ---- alloc ---------------------------------------------------------------------------------------


def wrapper_text(prepared: "Prepared", workdir: str, id_path: str, carry: Mapping[str, str] = {}) -> str:
    """The script the scheduler runs inside the allocation: it names the allocation (id file,
    HPC_LAUNCH_ALLOC), opens the shell, and leaves the exit-code file when the shell leaves."""
    from ..render import path_expr, pattern_expr

    job = prepared.job
    p = job.profile
    dialect = dialects.get(p.dialect)
    log = pattern_expr(p.log.name, {"name": job.name}, {"job_num": "JOB_NUM", "job_id": "JOB_ID"})
    q = shlex.quote
    return "\n".join(
        [
            "#!/bin/bash",
            f"# hpc-launch alloc: {job.name} on {p.name}; run by the scheduler inside the allocation",
            *(
                [f"JOB_ID={dialect.job_id_expr}", f"JOB_NUM={dialect.job_num_expr}"]
                if dialect.has_scheduler
                else _local_holder(prepared.script.script_name, id_path)
            ),
            f"cd {q(workdir)} || exit 1",
            f"HPC_LAUNCH_LOG={q(workdir)}/{log}",
            f'export {ALLOC_ENV}="$JOB_ID" {ALLOC_CLUSTER_ENV}={q(p.name)}',
            # the job's virtualenv first on PATH: `hpc-launch run` is there (qrsh, qsub -I pass no PATH)
            *([f'export PATH={path_expr(job.venv)}/bin:"$PATH"'] if job.venv else []),
            # and hpc-launch's own directories as `alloc` had them: the runs go to the same job store
            *[f"export {k}={q(v)}" for k, v in sorted(carry.items())],
            f'printf "%s\\n" "$JOB_ID" > {q(id_path)}.tmp && mv -f {q(id_path)}.tmp {q(id_path)}',
            # the shell opens once `alloc` has recorded the allocation: a `run` typed at once finds it
            f"for _ in $(seq 300); do [ -e {q(id_path + RECORDED_SUFFIX)} ] && break; sleep 0.1; done",
            'echo "[hpc-launch] allocation $JOB_ID opened on $(hostname) at $(date); '
            'inside it: hpc-launch run" >> "$HPC_LAUNCH_LOG"',
            'echo "[hpc-launch] allocation $JOB_ID: hpc-launch run starts the training here; '
            'exit ends the allocation" >&2',
            '"${SHELL:-/bin/bash}" -i',
            "rc=$?",
            'echo "[hpc-launch] allocation $JOB_ID closed at $(date) (exit $rc)" >> "$HPC_LAUNCH_LOG"',
            f'echo "$rc" {q(prepared.script.script_name)} "${{EPOCHREALTIME:-$(date +%s)}}" '
            f'> "$HPC_LAUNCH_LOG"{EXIT_FILE_SUFFIX}',
            'exit "$rc"',
            "",
        ]
    )


def _local_holder(script_name: str, id_path: str) -> List[str]:
    """No scheduler: a session of its own stands for the allocation while the shell runs (its id
    is the allocation's, as a local job's is; `status` finds it by the script's name, `cancel`
    ends the shell through it)."""
    q = shlex.quote
    hold = (
        'echo "$$" > "$1.tmp" && mv -f "$1.tmp" "$1"; trap \'pkill -HUP -P "$2"; kill -HUP "$2"; exit 0\' TERM; '
        'while kill -0 "$2" 2>/dev/null; do sleep 1; done'
    )
    return [
        f'setsid bash -c {q(hold)} "$(dirname -- "$0")"/{q(script_name)} {q(id_path)} "$$" &',
        f"for _ in $(seq 50); do [ -s {q(id_path)} ] && break; sleep 0.1; done",
        f"read -r JOB_ID < {q(id_path)} || exit 1",
        "JOB_NUM=$JOB_ID",
    ]


def interactive_spec(spec: Any, profile_file: Any) -> Any:
    """`alloc` without --queue: the profile's queue for interactive work where it names one and
    that queue takes the allocation's nodes and walltime (else the batch defaults and fallbacks)."""
    from ..site import profiles
    from ..resolve.queue_time import asked_walltime, takes

    if spec.queue:
        return spec
    profile = profiles.load(spec.cluster, profile_file=profile_file)
    name = profile.interactive_queue
    nodes = spec.nodes if isinstance(spec.nodes, int) else 1
    if name and takes(profile.queues[name], nodes, asked_walltime(spec.walltime)):
        return replace(spec, queue=name)
    return spec


def alloc_argv(prepared: "Prepared", script_path: str) -> List[str]:
    """The scheduler's command that holds the allocation and runs the wrapper in it."""
    from ..render import directive_lines, submit_flags

    job = prepared.job
    p = job.profile
    dialect = dialects.get(p.dialect)
    if not dialect.supports(dialects.Allocation):
        raise SpecError(
            f"{dialect.title or dialect.name} has no interactive allocation command that hpc-launch knows",
            hint=f"submit a batch job instead: hpc-launch submit --cluster {p.name}",
        )
    allocation = cast(dialects.Allocation, dialect)
    argv = allocation.alloc_argv(directive_lines(job), ["bash", script_path], submit_flags=submit_flags(job))
    return dialects.with_site_commands(argv, p.commands)


def terminal_argv(argv: List[str], host: str, workdir: str) -> List[str]:
    """`argv` run on the terminal where the scheduler is: here, or on the login host over
    `ssh -t` (the allocation commands want a terminal)."""
    if host == LOCAL_HOST:
        return argv
    return ["ssh", "-t", host, f"cd {shlex.quote(workdir)} && {shlex.join(argv)}"]


def tmux_argv(session: str, argv: List[str], workdir: str) -> List[str]:
    """--no-shell: the allocation's terminal in a detached tmux session, to attach to later."""
    return ["tmux", "new-session", "-d", "-s", session, "-c", workdir, shlex.join(argv)]


def open_allocation(
    prepared: "Prepared",
    options: Dict[str, Any],
    *,
    shell: bool = True,
    store: Optional[JobStore] = None,
    say: Callable[[str], None] = lambda line: None,
    poll_s: float = 0.2,
) -> int:
    """Ask the scheduler for the allocation, record it the moment it starts, and wait for its
    shell (`shell`) or, with --no-shell, return once it is held. The exit code."""
    job = prepared.job
    profile = job.profile
    dialect = dialects.get(profile.dialect)
    store, transport, own = opened(prepared, store, None)
    try:
        workdir, script_path = placed(transport, prepared)
        id_path = script_path + ID_SUFFIX
        argv = alloc_argv(prepared, script_path)
        carry = {k: os.environ[k] for k in CARRIED if os.environ.get(k)} if prepared.host == LOCAL_HOST else {}
        transport.put_text(script_path, wrapper_text(prepared, workdir, id_path, carry), mode=0o755)
        command = terminal_argv(argv, prepared.host, workdir)
        session = f"hpc-alloc-{job.name}-{prepared.script.stamp}"
        if not shell:
            command = tmux_argv(session, command, workdir)
        say(f"asking {profile.name} for an allocation: {shlex.join(argv)}")
        child = subprocess.Popen(command, cwd=workdir if prepared.host == LOCAL_HOST else None)
        record: Optional[JobRecord] = None
        while record is None:
            job_id = _read_id(transport, id_path)
            if job_id:
                record = record_for(
                    profile,
                    dialect,
                    job_id=job_id,
                    host=prepared.host,
                    name=job.name,
                    workdir=workdir,
                    script_path=script_path,
                    submit_argv=argv,
                )
                record.state = JobState.RUNNING.value
                files = [str(f) for f in (options.get("profile_files") or [])]
                record.extra = {**record.extra, ALLOC_KEY: {"options": options["job"], "profile_files": files}}
                add_or_explain(store, record, prepared)
                transport.put_text(id_path + RECORDED_SUFFIX, "", mode=0o644)
                say(f"allocation {job_id} on {profile.name} recorded; inside it: hpc-launch run")
                if not shell:
                    say(f"held in tmux session {session}: attach with `tmux attach -t {session}`")
                    return 0
                break
            if child.poll() is not None and (shell or not _tmux_alive(session)):
                rc = child.returncode
                say(f"the scheduler gave no allocation (exit {rc}): nothing was recorded")
                return rc or 1
            time.sleep(poll_s)
        try:
            rc = child.wait()
        except KeyboardInterrupt:
            rc = child.wait()
        _refresh(store, record, transport)
        return rc
    finally:
        if own:
            transport.close()


def _read_id(transport: Transport, path: str) -> str:
    try:
        size = transport.size(path)
        if not size:
            return ""
        return transport.read_from(path, 0, min(size, 200)).decode("utf-8", "replace").strip()
    except OSError:
        return ""


def _tmux_alive(session: str) -> bool:
    return subprocess.run(["tmux", "has-session", "-t", session], capture_output=True).returncode == 0


def _refresh(store: JobStore, record: JobRecord, transport: Transport) -> None:
    """The allocation's state once its shell has left (the scheduler's word and the exit file)."""
    from .state import refresh

    for _ in range(ENDING_POLLS):  # the scheduler may say "completing" for a moment after the shell left
        try:
            (now,) = refresh(store, [record], transport_for=lambda host: transport)
        except Exception as exc:  # the shell has left: the state is a courtesy, `status` asks again
            sys.stderr.write(f"hpc-launch: note: the allocation's state was not refreshed ({exc})\n")
            return
        if JobState(now.state).terminal:
            return
        time.sleep(1.0)


# ---- run -----------------------------------------------------------------------------------------


def allocation_record(store: JobStore, inside: Inside, cluster: Optional[str]) -> Optional[JobRecord]:
    """The record `alloc` left for the allocation this shell is in; None: not one of ours."""
    for rec in store.list(limit=500):
        if rec.job_id != inside.job_id or ALLOC_KEY not in (rec.extra or {}):
            continue
        if (cluster or inside.cluster) in (None, rec.cluster):
            return rec
    return None


def run_options(alloc: Optional[JobRecord], given: Dict[str, Any], cluster: Optional[str]) -> Dict[str, Any]:
    """The run's job options: the allocation's as `alloc` was given them, the run's on top (its
    --script, --train-args, --env added), always here (the run starts on this node)."""
    base = dict((alloc.extra or {})[ALLOC_KEY]["options"]) if alloc else {}
    if cluster:
        base["cluster"] = cluster
    env = {**(base.get("env") or {}), **(given.pop("env", None) or {})}
    base.update({k: v for k, v in given.items() if v is not None})
    base.update(env=env or None, login="local", chain=None)
    if alloc:
        base["workdir"] = alloc.workdir
    return base


def next_run_name(store: JobStore, alloc_name: str, job_id: str) -> str:
    taken = sum(1 for r in store.list(limit=2000) if ((r.extra or {}).get(RUN_KEY) or {}).get("job_id") == job_id)
    return f"{alloc_name}-run{taken + 1}"


def run_argv(log_path: str, script_path: str) -> List[str]:
    """The run in a session of its own (its id; `cancel` stops the whole group), its output to
    its log, the id handed back first (as the no-scheduler dialect starts a job)."""
    launch = 'setsid bash -c \'echo "$$"; exec >>"$1" 2>&1 </dev/null; exec bash "$2"\' hpc-launch-run "$1" "$2" &'
    return ["bash", "-c", launch, "hpc-launch-start", log_path, script_path]


def start_run(
    prepared: "Prepared", inside: Inside, *, store: Optional[JobStore] = None, transport: Optional[Transport] = None
) -> JobRecord:
    """Write the run's script (rendered for the allocation: its launcher, its node list) and
    start it now, on this node; record it. The scheduler is not asked: no queue wait."""
    from ..dialects.none import NoScheduler
    from .submission import queue, write_capsule
    from ..transport.send_files import FilesAhead

    job = prepared.job
    profile = job.profile
    dialect = dialects.get(profile.dialect)
    store, transport, own = opened(prepared, store, transport)
    try:
        workdir, script_path = placed(transport, prepared)
        # the job script names its log by the allocation's id (the scheduler's variables): the
        # run's name keeps each run's log its own
        named = record_for(
            profile,
            dialect,
            job_id=inside.job_id,
            host=LOCAL_HOST,
            name=job.name,
            workdir=workdir,
            script_path=script_path,
            submit_argv=[],
        )
        log_path = named.exit_path[: -len(EXIT_FILE_SUFFIX)]
        ahead = FilesAhead(transport)
        written: List[str] = []
        capsule_dir = write_capsule(ahead, prepared, workdir, written)
        queue(ahead, script_path, prepared.script.text.encode(), 0o755, written)
        if job.pass_env:
            path = secrets.path_for(script_path)
            queue(ahead, path, secrets.encode(secrets.collect(job.pass_env)), 0o600, written, private=True)
        argv = run_argv(log_path, script_path)
        env: Dict[str, Optional[str]] = dict(secrets.submit_env(job.pass_env) or {})
        if not dialect.has_scheduler:  # no scheduler variables: the job script takes the allocation's id from here
            env["HPC_LAUNCH_JOB_ID"] = inside.job_id
        result = ahead.run(argv, cwd=workdir, env=env, timeout=60)
        if result.rc != 0:
            raise SpecError(f"the run did not start: {(result.err or result.out).strip()[:200]}")
        pid = NoScheduler().parse_submit(result.out)
        record = replace(
            named,
            job_id=pid,
            dialect=NoScheduler.name,
            log_path=log_path + LIVE_LOG_SUFFIX if profile.log.live == "tee" else log_path,
            state=JobState.RUNNING.value,
            submit_argv=argv,
            extra={**named.extra, "capsule": capsule_dir, RUN_KEY: {"cluster": profile.name, "job_id": inside.job_id}},
        )
        add_or_explain(store, record, prepared)
        return record
    finally:
        if own:
            transport.close()


def follow_run(record: JobRecord, *, show_all: bool = False) -> int:
    """Follow the run to its end, its exit code; Ctrl-C stops the run (it is this terminal's)."""
    from ..follow import follow_job
    from .cancel import cancel

    try:
        return follow_job(record, show_all=show_all)
    except KeyboardInterrupt:
        sys.stderr.write(f"hpc-launch: interrupted: stopping run {record.job_id}\n")
        try:
            cancel(JobStore(), record, transport_for(LOCAL_HOST))
        except Exception as exc:
            sys.stderr.write(f"hpc-launch: could not stop run {record.job_id} ({exc}): hpc-launch cancel it\n")
        return EXIT_SIGINT


def scheduler_env_hint() -> str:
    names = ", ".join(f"{id_var} + {beside}" for _, id_var, beside in SCHEDULER_ENV)
    return f"start one with `hpc-launch alloc` (or run inside a scheduler's allocation: {names})"


__all__ = [
    "ALLOC_ENV",
    "Inside",
    "detect",
    "open_allocation",
    "start_run",
    "follow_run",
    "allocation_record",
    "run_options",
    "next_run_name",
]
