"""The typer app: parses, calls, prints. No logic lives here.

Imports of anything heavier than typer happen inside the commands, so `hpc-launch hostfile`
inside a job and `submit --dry-run` on a login node start fast.
"""

from __future__ import annotations

import os
import shlex
import signal
import sys
from typing import List, Optional


def _interrupted_while_starting(signum, frame):
    raise SystemExit(130)  # Ctrl-C before any command ran: nothing to undo, nothing to say


if __name__ in ("hpc_launch.cli", "__main__"):
    signal.signal(signal.SIGINT, _interrupted_while_starting)

# after the handler: importing typer is most of the start-up time
import typer  # noqa: E402

from .errors import HpcLaunchError  # noqa: E402

HELP_OPTIONS = {"help_option_names": ["-h", "--help"]}
COMPLETE_VAR = "_HPC_LAUNCH_COMPLETE"  # the shell's completion function calls us back with it set

app = typer.Typer(
    add_completion=False,  # `hpc-launch completion SHELL` instead: no extra options on every command
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings=HELP_OPTIONS,
    help="Render, submit and follow DeepSpeed jobs on named clusters (ABCI, Miyabi, Polaris, Slurm, pods, local).",
)
clusters_app = typer.Typer(help="List the known clusters, or show one resolved.", invoke_without_command=True,
                           context_settings=HELP_OPTIONS)
app.add_typer(clusters_app, name="clusters")


def _complete_clusters(incomplete: str) -> List[str]:
    from . import profiles

    return [name for name in profiles.available() if name.startswith(incomplete)]


def _complete_jobs(incomplete: str) -> List[str]:
    from .records import JobStore

    return [r.job_id for r in JobStore().list(limit=200) if r.job_id.startswith(incomplete)]


def _version(value: bool) -> None:
    if value:
        from . import __version__

        sys.stdout.write(f"hpc-launch {__version__}\n")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", "-V", callback=_version, is_eager=True, help="print the version and exit")) -> None:
    """Render, submit and follow DeepSpeed jobs on named clusters (ABCI, Miyabi, Polaris, Slurm, pods, local)."""


def _err(message: str) -> None:
    sys.stderr.write(f"hpc-launch: error: {message}\n")


def _parse_env(pairs: List[str]) -> dict:
    env = {}
    for pair in pairs or []:
        if "=" not in pair:
            raise typer.BadParameter(f"{pair!r} is not NAME=VALUE", param_hint="--env")
        key, value = pair.split("=", 1)
        env[key] = value
    return env


def _split_list(value: Optional[str]) -> Optional[List[str]]:
    if value is None:
        return None
    return [v for v in (x.strip() for x in value.split(",")) if v]


def _split_args(value: Optional[str]) -> Optional[List[str]]:
    if value is None:
        return None
    try:
        return shlex.split(value)
    except ValueError as exc:  # "No closing quotation"
        raise typer.BadParameter(f"{exc} in {value!r}: quote it as one shell word list, e.g. --train-args \"--note 'a b'\"",
                                 param_hint="--train-args") from None


def _expand_hosts(value: Optional[str]) -> Optional[List[str]]:
    if value is None:
        return None
    from .nodelist import expand_slurm_nodelist

    return expand_slurm_nodelist(value)


# ---------------------------------------------------------------------------------------------
# submit


@app.command()
def submit(
    cluster: Optional[str] = typer.Option(None, "--cluster", "-c", autocompletion=_complete_clusters, help="cluster profile name (default: local)"),
    nodes: Optional[int] = typer.Option(None, "--nodes", "-n", help="number of nodes (default 1; pods: all --hosts)"),
    gpus_per_node: Optional[int] = typer.Option(None, "--gpus-per-node", "-g", help="GPUs (ranks) per node; default: all of the node's"),
    queue: Optional[str] = typer.Option(None, "--queue", "-q", help="queue / partition / resource type"),
    walltime: Optional[str] = typer.Option(None, "--walltime", "-t", help="HH:MM:SS (or 90m, 2h)"),
    group: Optional[str] = typer.Option(None, "--group", "--project", "-P", help="accounting group/project, however the site spells it"),
    name: Optional[str] = typer.Option(None, "--name", "-N", help="job name (the log is NAME.oJOBID)"),
    modules: Optional[str] = typer.Option(None, "--modules", help="comma-separated modules to load (replaces the profile's)"),
    env: List[str] = typer.Option([], "--env", "-e", help="NAME=VALUE exported in the job (repeatable; written into the script)"),
    pass_env: List[str] = typer.Option([], "--pass-env", help="NAME of a variable set in this shell (a secret): the job gets it from a file only you can read (repeatable)"),
    script: Optional[str] = typer.Option(None, "--script", help="your own training script instead of `python -m train`"),
    train_args: Optional[str] = typer.Option(None, "--train-args", help="arguments for the training entrypoint, as one shell-quoted string"),
    directive: List[str] = typer.Option([], "--directive", "-d", help="extra scheduler directive; replaces a default with the same key (repeatable)"),
    hosts: Optional[str] = typer.Option(None, "--hosts", help="pods: comma-separated node names/IPs"),
    gather: Optional[int] = typer.Option(None, "--gather", metavar="PORT", help="pods: the other hosts' addresses come at start-up from `hpc-launch announce` on them"),
    workdir: Optional[str] = typer.Option(None, "--workdir", help="where the job runs and logs (default: here, or ~/hpc-launch/NAME remotely)"),
    venv: Optional[str] = typer.Option(None, "--venv", help="virtualenv to activate in the job"),
    login: Optional[str] = typer.Option(None, "--login", help="submit over SSH on this host (~/.ssh/config alias); `local` forces this machine"),
    config: Optional[str] = typer.Option(None, "--config", help="project config file (default: ./hpc-launch.yaml if present)"),
    profile: Optional[str] = typer.Option(None, "--profile", help="an extra cluster profile YAML file, merged last"),
    stop_before: Optional[str] = typer.Option(None, "--stop-before", help="checkpoint and stop this long before the walltime (default: a tenth of it, 30 s to 5 min)"),
    chain: Optional[int] = typer.Option(None, "--chain", help="N dependent jobs, each resuming from the newest checkpoint (for trainings longer than a walltime)"),
    dry_run: bool = typer.Option(False, "--dry-run", help="print the script (stdout) and the submit command (stderr); touch nothing"),
    follow: bool = typer.Option(False, "--follow", "-f", help="follow the log until the job ends; exit with its exit code"),
    show_all: bool = typer.Option(False, "--all", "-a", help="with --follow: every line, the frameworks' chatter too (the log file always has it)"),
) -> None:
    """Render the job script for a cluster and submit it (or print it with --dry-run)."""
    from pathlib import Path

    from .project_config import find_project_config, load_project_config
    from .spec import spec_from
    from .prepare import prepare

    config_path = Path(config) if config else find_project_config()
    base = load_project_config(config_path) if config_path else {}
    overrides = dict(
        cluster=cluster, nodes=nodes, gpus_per_node=gpus_per_node, queue=queue, walltime=walltime,
        group=group, name=name, modules=_split_list(modules), env=_parse_env(env), script=script,
        train_args=_split_args(train_args), directives=list(directive),
        hosts=_expand_hosts(hosts), workdir=workdir, venv=venv, login=login, pass_env=list(pass_env),
        stop_before=stop_before, chain=chain, gather=gather,
    )
    if train_args is not None and not overrides["train_args"]:
        overrides["train_args"] = None
        base["train_args"] = []
    spec = spec_from(base, overrides)
    prepared = prepare(spec, profile_file=profile)
    if dry_run:
        sys.stdout.write(prepared.script.text)
        sys.stdout.flush()
        sys.stderr.write(f"# script: {prepared.script_path}\n{prepared.submit_display()}\n")
        return
    from .jobs import submit as submit_job

    announced: list = []

    def announce(record) -> None:  # runs before Ctrl-C is let through: the id is always printed
        announced.append(record)
        print(record.job_id, flush=True)
        sys.stderr.write(f"submitted {record.name} as {record.job_id} on {record.cluster}; log: {record.log_path}\n")

    try:
        record = submit_job(prepared, on_recorded=announce)
    except KeyboardInterrupt:
        job = announced[0].job_id if announced else "(see `hpc-launch list`)"
        sys.stderr.write(f"hpc-launch: interrupted after job {job} was submitted and recorded: it keeps running. "
                         f"Follow it: hpc-launch logs -f {job}   Stop it: hpc-launch cancel {job}\n")
        raise typer.Exit(130) from None
    if follow:
        from .follow import follow_chain

        raise typer.Exit(follow_chain(record, show_all=show_all))


# ---------------------------------------------------------------------------------------------
# hostfile


@app.command()
def hostfile(
    output: Optional[str] = typer.Option(None, "--output", "-o", help="write here (atomically) instead of stdout"),
    slots: Optional[int] = typer.Option(None, "--slots", "-s", help="slots (GPUs) per node; default: with --cluster the profile's GPUs, else as often as the node list names a host"),
    cluster: Optional[str] = typer.Option(None, "--cluster", "-c", autocompletion=_complete_clusters, help="take slots from this cluster profile"),
    source: Optional[str] = typer.Option(None, "--from", help="scheduler whose node list to read: pbspro, gridengine, cobalt, slurm"),
    nodefile: Optional[str] = typer.Option(None, "--nodefile", help="read this node file (one host per line)"),
    hosts: Optional[str] = typer.Option(None, "--hosts", help="comma-separated hosts"),
    include: Optional[str] = typer.Option(None, "--include", "-i", help="keep only these hosts: host1@host2 (DeepSpeed syntax)"),
    exclude: Optional[str] = typer.Option(None, "--exclude", "-x", help="drop these hosts: host1@host2 (DeepSpeed syntax)"),
) -> None:
    """Inside a job: the DeepSpeed hostfile from the scheduler's node list."""
    from . import hostfile as hf

    if source is not None:
        from . import dialects

        choices = [n for n in dialects.names() if dialects.get(n).has_scheduler]
        if source not in choices:
            raise typer.BadParameter(f"{source!r}: use one of {', '.join(choices)}", param_hint="--from")
    if slots is None and cluster:
        from . import profiles

        slots = max(profiles.load(cluster).node.gpus, 1)
    text = hf.build(env=os.environ, prefer=source, nodefile=nodefile, hosts=hosts, slots=slots, include=include, exclude=exclude)
    if output:
        hf.write_atomic(output, text)
    else:
        sys.stdout.write(text)


@app.command()
def announce(
    target: str = typer.Argument(..., metavar="HOST:PORT", help="the first pod and the job's --gather port"),
    name: Optional[str] = typer.Option(None, "--name", help="this host's name as the job's --hosts lists it (default: hostname)"),
    address: Optional[str] = typer.Option(None, "--address", help="the address the others reach this host at (default: the one that reaches HOST)"),
    timeout: float = typer.Option(120.0, "--timeout", help="seconds to keep trying while the job has not started listening"),
) -> None:
    """On a worker pod: tell a `--gather` job starting on HOST this pod's name and address."""
    from .gather import Refused
    from .gather import announce as send

    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        raise typer.BadParameter(f"{target!r} is not HOST:PORT (e.g. 10.0.0.11:29400)", param_hint="HOST:PORT")
    try:
        who, where = send(host, int(port), name=name, address=address, timeout=timeout)
    except (Refused, TimeoutError) as exc:
        _err(f"{exc}")
        raise typer.Exit(1) from None
    sys.stderr.write(f"announced {who} at {where} to {target}\n")


# ---------------------------------------------------------------------------------------------
# clusters


@clusters_app.callback()
def clusters_list(ctx: typer.Context, json_: bool = typer.Option(False, "--json", help="the list as JSON (keys: docs/commands.md)")) -> None:
    """List the known clusters."""
    if ctx.invoked_subcommand:
        return
    from . import profiles

    if json_:
        import json

        rows: List[dict] = []
        for name in profiles.available():
            try:
                p = profiles.load(name)
            except HpcLaunchError as exc:
                rows.append({"name": name, "status": "broken", "error": exc.one_line()})
                continue
            rows.append({"name": p.name, "scheduler": p.dialect, "gpus_per_node": p.node.gpus, "launcher": p.launch.launcher,
                         "status": p.status, "title": p.title, "queues": sorted(p.queues), "login": p.login})
        sys.stdout.write(json.dumps(rows, indent=1) + "\n")
        return

    from rich.console import Console
    from rich.table import Table

    table = Table(box=None, pad_edge=False)
    for col in ("name", "scheduler", "GPUs/node", "launcher", "status", "title"):
        table.add_column(col)
    for name in profiles.available():
        try:
            p = profiles.load(name)
        except HpcLaunchError as exc:
            table.add_row(name, "-", "-", "-", "broken", exc.one_line())
            continue
        table.add_row(p.name, p.dialect, str(p.node.gpus), p.launch.launcher, p.status, p.title)
    Console().print(table)


@clusters_app.command("show")
def clusters_show(name: str = typer.Argument(..., help="cluster name"), profile: Optional[str] = typer.Option(None, "--profile")) -> None:
    """Print one cluster profile, resolved (defaults filled, user overrides merged) as YAML."""
    import yaml

    from . import profiles

    p = profiles.load(name, profile_file=profile)
    sources = profiles.sources_of(p.name, profile_file=profile)
    sys.stdout.write("# from: " + ", ".join(str(s) for s in sources) + "\n")
    sys.stdout.write(yaml.safe_dump(p.to_dict(), sort_keys=False, allow_unicode=True))


# ---------------------------------------------------------------------------------------------
# plan


@app.command()
def plan(
    model: str = typer.Option("resnet50", "--model", "-m", help="torchvision model name"),
    cluster: str = typer.Option("abci", "--cluster", "-c", autocompletion=_complete_clusters),
    nodes: int = typer.Option(1, "--nodes", "-n"),
    gpus_per_node: Optional[int] = typer.Option(None, "--gpus-per-node", "-g"),
    queue: Optional[str] = typer.Option(None, "--queue", "-q"),
    json_: bool = typer.Option(False, "--json", help="the plan as JSON (keys: docs/commands.md)"),
) -> None:
    """Per-GPU memory of model states under each ZeRO stage (DeepSpeed's estimators), and a recommendation."""
    from . import profiles

    p = profiles.load(cluster)
    q = p.queues.get(queue or p.default_queue or "")
    gpus = gpus_per_node if gpus_per_node is not None else (q.gpus if q and q.gpus is not None else p.node.gpus)
    if not p.node.gpu_mem_gib:
        raise HpcLaunchError(f"{cluster} has no node.gpu_mem_gib in its profile", hint="add it, or pick a GPU cluster")
    from .plan import format_plan, plan_memory  # imports torch/deepspeed lazily

    import contextlib

    # DeepSpeed's logger writes to the stdout it finds when first imported: keep it off ours
    with contextlib.redirect_stdout(sys.stderr):
        result = plan_memory(model, nodes=nodes, gpus_per_node=max(gpus, 1), gpu_mem_gib=p.node.gpu_mem_gib, cpu_mem_gib=p.node.mem_gib)
    if json_:
        import dataclasses
        import json

        sys.stdout.write(json.dumps(dataclasses.asdict(result), indent=1) + "\n")
    else:
        sys.stdout.write(format_plan(result) + "\n")


# ---------------------------------------------------------------------------------------------
# jobs: logs, status, list, cancel


def _transport_for(host: str):
    from .transport import open_transport

    return open_transport(None if host == "localhost" else host)


@app.command()
def logs(
    job_id: str = typer.Argument(..., help="job id (as printed by submit)", autocompletion=_complete_jobs),
    follow_: bool = typer.Option(False, "--follow", "-f", help="follow until the job ends; exit with its exit code"),
    summary: bool = typer.Option(False, "--summary", "-s", help="the job's summary: state, time split, steps, loss, samples/s, memory, eval"),
    show_all: bool = typer.Option(False, "--all", "-a", help="with -f: every line, the frameworks' chatter too (the log file always has it)"),
    cluster: Optional[str] = typer.Option(None, "--cluster", "-c", autocompletion=_complete_clusters, help="when the id exists on several clusters"),
) -> None:
    """Print (or follow) a job's log: NAME.oNNNN, or the site's own log name."""
    from .records import JobStore

    from .errors import JobNotFound

    store = JobStore()
    try:
        record = store.get(job_id, cluster)
    except JobNotFound:
        from .jobs import group_members

        members = group_members(store, job_id, cluster)
        if not members:
            raise
        if not follow_:
            raise HpcLaunchError(f"{job_id} is a sweep or job array of {len(members)} jobs",
                                 hint=f"`hpc-launch logs JOBID` for one of them (`hpc-launch status {job_id}` lists them), or -f to follow them all") from None
        from .sweep import watch

        ended = watch(store, members, _transport_for)
        raise typer.Exit(0 if all(r.state == "done" for r in ended) else 1) from None
    if follow_:
        from .follow import follow_chain

        raise typer.Exit(follow_chain(record, store=store, show_all=show_all))
    from .follow import read_whole_log

    try:
        text = read_whole_log(record)
    except FileNotFoundError:
        raise HpcLaunchError(f"the log {record.log_path} does not exist yet (job {record.state})", hint=f"`hpc-launch logs -f {job_id}` waits for it") from None
    if summary:
        from .follow import summary_block
        from .jobs import refresh
        from .states import JobState

        record = refresh(store, [record], _transport_for)[0]
        sys.stdout.write(summary_block(record, text, JobState(record.state), record.exit_code) + "\n")
    else:
        sys.stdout.write(text)


def _jobs_table(records) -> None:
    import time

    from rich.console import Console
    from rich.table import Table

    table = Table(box=None, pad_edge=False)
    for col in ("job id", "cluster", "name", "state", "exit", "submitted", "host", "log", "scheduler says"):
        table.add_column(col)
    for r in records:
        when = time.strftime("%m-%d %H:%M:%S", time.localtime(r.submit_time))
        table.add_row(r.job_id, r.cluster, r.name, r.state, "" if r.exit_code is None else str(r.exit_code), when, r.host, r.log_path, r.comment)
    Console(width=200).print(table)


@app.command()
def status(
    job_ids: List[str] = typer.Argument(None, help="job ids (default: all active jobs)", autocompletion=_complete_jobs),
    cluster: Optional[str] = typer.Option(None, "--cluster", "-c", autocompletion=_complete_clusters),
    json_: bool = typer.Option(False, "--json", help="a JSON list of jobs (keys: docs/commands.md)"),
) -> None:
    """Ask the schedulers (one query per cluster) and show the jobs' states."""
    from .jobs import refresh
    from .records import JobStore

    from .jobs import find_jobs

    store = JobStore()
    # a sweep's or a job array's id stands for all its jobs
    records = [r for j in job_ids for r in find_jobs(store, j, cluster)] if job_ids else store.list(cluster=cluster, active_only=True)
    _show_jobs(refresh(store, records, _transport_for), json_)


@app.command("list")
def list_jobs(
    cluster: Optional[str] = typer.Option(None, "--cluster", "-c", autocompletion=_complete_clusters),
    active: bool = typer.Option(False, "--active", help="only jobs not yet ended"),
    refresh_: bool = typer.Option(False, "--refresh", "-r", help="ask the schedulers first"),
    limit: int = typer.Option(50, "--limit", "-l"),
    json_: bool = typer.Option(False, "--json", help="a JSON list of jobs (keys: docs/commands.md)"),
) -> None:
    """The jobs hpc-launch has submitted, newest first."""
    from .jobs import refresh, refresh_is_cheap
    from .records import JobStore

    store = JobStore()
    records = store.list(cluster=cluster, active_only=active, limit=limit)
    # jobs on this machine with no scheduler cost one local `ps`: always show their real state
    records = refresh(store, records if refresh_ else [r for r in records if refresh_is_cheap(r)], _transport_for, keep=records)
    _show_jobs(records, json_)


# Stable keys of `list --json` / `status --json` (documented in docs/commands.md): add, never rename.
JOB_JSON_KEYS = ("job_id", "cluster", "name", "state", "exit_code", "comment", "submit_time", "end_time",
                 "host", "workdir", "log_path", "script_path", "dialect")


def _show_jobs(records, as_json: bool) -> None:
    if as_json:
        import json

        rows = [{key: getattr(r, key) for key in JOB_JSON_KEYS} for r in records]
        sys.stdout.write(json.dumps(rows, indent=1) + "\n")
    else:
        _jobs_table(records)


@app.command()
def adopt(
    job_id: str = typer.Argument(..., help="the scheduler's job id"),
    cluster: str = typer.Option(..., "--cluster", "-c", autocompletion=_complete_clusters),
    workdir: str = typer.Option(..., "--workdir", help="the job's work dir (absolute, on the host that submitted it)"),
    name: str = typer.Option("train", "--name", "-N"),
    script: str = typer.Option("", "--script", help="the job script's path (its name tells this job's files from an earlier job's)"),
    login: Optional[str] = typer.Option(None, "--login", help="the SSH alias it was submitted through"),
) -> None:
    """Record a job that exists but has no record (printed by submit when its store failed)."""
    from . import profiles
    from .jobs import adopt as adopt_job
    from .records import JobStore

    profile = profiles.load(cluster)
    host = "localhost" if not login or login in ("local", "localhost") else login
    record = adopt_job(JobStore(), profile, job_id=job_id, host=host, name=name, workdir=workdir,
                       script_path=script or f"{workdir.rstrip('/')}/.hpc-launch/{name}.sh")
    sys.stderr.write(f"recorded {record.job_id} on {record.cluster}; log: {record.log_path}\n")


@app.command()
def cancel(
    job_id: str = typer.Argument(..., help="job id", autocompletion=_complete_jobs),
    cluster: Optional[str] = typer.Option(None, "--cluster", "-c", autocompletion=_complete_clusters),
) -> None:
    """Cancel a job (qdel / scancel / kill of the local job's process group) and report how it ended."""
    from .jobs import cancel as cancel_job
    from .records import JobStore
    from .states import JobState

    from .jobs import cancel_group, find_jobs

    store = JobStore()
    found = find_jobs(store, job_id, cluster)
    if len(found) > 1 or (found[0].extra or {}).get("sweep") == job_id:  # a sweep or an array: all its jobs
        sys.stderr.write("\n".join(cancel_group(store, found, _transport_for)) + "\n")
        return
    record = found[0]
    if JobState(record.state).terminal:
        raise HpcLaunchError(f"job {record.job_id} already ended ({record.state}" + (f", exit code {record.exit_code})" if record.exit_code is not None else ")"))
    result = cancel_job(store, record, _transport_for(record.host))
    sys.stderr.write(result.message + "\n")


@app.command()
def completion(shell: str = typer.Argument(..., help="bash, zsh or fish")) -> None:
    """Print the shell completion script (commands, options, cluster names, job ids).

    bash: `source <(hpc-launch completion bash)` in ~/.bashrc; zsh: the same in ~/.zshrc;
    fish: `hpc-launch completion fish > ~/.config/fish/completions/hpc-launch.fish`."""
    from typer._completion_shared import get_completion_script

    if shell not in ("bash", "zsh", "fish"):
        raise typer.BadParameter(f"{shell!r}: use bash, zsh or fish", param_hint="SHELL")
    sys.stdout.write(get_completion_script(prog_name="hpc-launch", complete_var=COMPLETE_VAR, shell=shell) + "\n")


@app.command()
def doctor(
    target: str = typer.Argument(..., help="job id (as printed by submit), or the path of a log file", autocompletion=_complete_jobs),
    cluster: Optional[str] = typer.Option(None, "--cluster", "-c", autocompletion=_complete_clusters, help="when the id exists on several clusters"),
) -> None:
    """Name the cause and the fix of a failed job, from its log, the scheduler's word and its exit status.

    Exit 0 when it names a cause (or nothing failed), 1 when the failure is not one it knows."""
    from .doctor import diagnose, report_lines

    if os.path.isfile(target):  # a log file: the exit-code file the job script writes beside it says how it ended
        with open(target, encoding="utf-8", errors="replace") as f:
            text = f.read()
        code = None
        try:
            with open(target + ".exitcode", encoding="utf-8") as f:
                word = (f.read().split() or [""])[0]
            code = int(word) if word.lstrip("-").isdigit() else None
        except OSError:
            pass
        diagnosis = diagnose(text, exit_code=code)
    else:
        from .follow import read_whole_log
        from .jobs import refresh
        from .records import JobStore
        from .states import JobState

        store = JobStore()
        record = refresh(store, [store.get(target, cluster)], _transport_for)[0]
        if not JobState(record.state).terminal:
            sys.stderr.write(f"hpc-launch: job {record.job_id} is still {record.state}: this is what its log shows so far\n")
        try:
            text = read_whole_log(record)
        except FileNotFoundError:
            text = ""  # never started (a refusal, `Can Never Run`): the scheduler's word is the evidence
        diagnosis = diagnose(text, exit_code=record.exit_code, comment=record.comment, state=record.state)
    sys.stdout.write("\n".join(report_lines(diagnosis)) + "\n")
    raise typer.Exit(0 if diagnosis.found or diagnosis.succeeded else 1)


# ---------------------------------------------------------------------------------------------
# sweep and report


@app.command()
def sweep(
    cluster: Optional[str] = typer.Option(None, "--cluster", "-c", autocompletion=_complete_clusters, help="cluster profile name (default: local)"),
    zero: Optional[str] = typer.Option(None, "--zero", help="ZeRO stages, comma-separated: 0,1,2,3"),
    offload: Optional[str] = typer.Option(None, "--offload", help="offloads: none,optimizer,optimizer+params"),
    precision: Optional[str] = typer.Option(None, "--precision", help="precisions: fp32,bf16,fp16"),
    nodes: Optional[str] = typer.Option(None, "--nodes", "-n", help="node counts, comma-separated"),
    micro_batch: Optional[str] = typer.Option(None, "--micro-batch", help="per-rank micro-batches, comma-separated"),
    grid: Optional[str] = typer.Option(None, "--grid", help="a YAML sweep file: axes (lists) and/or points: (flags win over its axes)"),
    train_args: Optional[str] = typer.Option(None, "--train-args", help="the other training arguments, shared by every point"),
    gpus_per_node: Optional[int] = typer.Option(None, "--gpus-per-node", "-g"),
    queue: Optional[str] = typer.Option(None, "--queue", "-q"),
    walltime: Optional[str] = typer.Option(None, "--walltime", "-t", help="per point"),
    group: Optional[str] = typer.Option(None, "--group", "--project", "-P"),
    name: str = typer.Option("sweep", "--name", "-N", help="job name; the sweep's id is NAME-TIMESTAMP"),
    env: List[str] = typer.Option([], "--env", "-e", help="NAME=VALUE exported in every job (repeatable)"),
    directive: List[str] = typer.Option([], "--directive", "-d", help="extra scheduler directive (repeatable)"),
    workdir: Optional[str] = typer.Option(None, "--workdir"),
    venv: Optional[str] = typer.Option(None, "--venv"),
    login: Optional[str] = typer.Option(None, "--login"),
    config: Optional[str] = typer.Option(None, "--config", help="project config file (default: ./hpc-launch.yaml if present)"),
    profile: Optional[str] = typer.Option(None, "--profile"),
    separate: bool = typer.Option(False, "--separate", help="one job per point even where the scheduler has arrays"),
    out: Optional[str] = typer.Option(None, "--out", "-o", help="the report's folder (default: ./SWEEP_ID)"),
    no_wait: bool = typer.Option(False, "--no-wait", help="submit and return; `hpc-launch report SWEEP_ID` later"),
    dry_run: bool = typer.Option(False, "--dry-run", help="check every point and print what would be submitted; submit nothing"),
) -> None:
    """Run a grid of DeepSpeed configurations (ZeRO stage, offload, precision, nodes, micro-batch) and report them.

    Every point is checked first (batch arithmetic, DeepSpeed's config validator, plan's memory
    estimators); one impossible point refuses the sweep. Submits one job array where the scheduler
    has arrays and all points ask for the same nodes, else one job per point; waits for all; writes
    report.md, report.csv, throughput.png and memory.png."""
    from pathlib import Path

    from . import sweep as sw
    from .project_config import find_project_config, load_project_config
    from .spec import spec_from

    axes: dict = {}
    points: list = []
    if grid:
        axes, points = sw.load_grid_file(grid)
    for axis, raw in (("zero", zero), ("offload", offload), ("precision", precision), ("nodes", nodes), ("micro_batch", micro_batch)):
        if raw is not None:
            axes[axis] = sw.axis_values(axis, raw, f"--{axis.replace('_', '-')}")
    values = sw.expand(axes, points, note=lambda line: sys.stderr.write(f"hpc-launch: {line}\n"))
    config_path = Path(config) if config else find_project_config()
    base = load_project_config(config_path) if config_path else {}
    overrides = dict(cluster=cluster, gpus_per_node=gpus_per_node, queue=queue, walltime=walltime, group=group, name=name,
                     env=_parse_env(env), train_args=_split_args(train_args), directives=list(directive), workdir=workdir,
                     venv=venv, login=login)
    spec = spec_from(base, overrides)
    plan = sw.plan(spec, values, profile_file=profile, separate=separate)
    for line in plan.notes:
        sys.stderr.write(f"hpc-launch: {line}\n")
    if dry_run:
        for sub in plan.submissions:
            sys.stdout.write(sub.prepared.script.text)
        sys.stderr.write(sw.describe(plan) + "\n")
        return
    from .records import JobStore

    store = JobStore()
    sys.stdout.write(plan.sweep_id + "\n")
    sys.stdout.flush()

    def announce(record) -> None:
        extra = record.extra or {}
        within = f" (task of array {extra['array']})" if extra.get("array") else ""
        sys.stderr.write(f"submitted point {extra.get('point_index', 0) + 1} [{sw.label(extra.get('point', {}))}] as {record.job_id}{within}; log: {record.log_path}\n")

    try:
        if plan.shares_one_machine and not no_wait:
            sys.stderr.write("hpc-launch: no scheduler on this cluster: the points run one after another, so none slows another's figures\n")
            ended = sw.submit_in_turn(plan, _transport_for, store=store, on_recorded=announce)
            _report(ended, out or plan.sweep_id, f"sweep {plan.sweep_id} on {ended[0].cluster}")
            raise typer.Exit(0 if all(r.state == "done" for r in ended) else 1)
        records = sw.submit(plan, store=store, on_recorded=announce)
        if no_wait:
            sys.stderr.write(f"hpc-launch: sweep {plan.sweep_id}: follow it with `hpc-launch logs -f {plan.sweep_id}`, report with `hpc-launch report {plan.sweep_id}`\n")
            return
        ended = sw.watch(store, records, _transport_for)
    except KeyboardInterrupt:
        later = " (points not yet started are not submitted)" if plan.shares_one_machine and not no_wait else ""
        sys.stderr.write(f"hpc-launch: interrupted: the sweep's submitted jobs keep running{later}. Follow: hpc-launch logs -f {plan.sweep_id}   "
                         f"Report: hpc-launch report {plan.sweep_id}   Stop: hpc-launch cancel {plan.sweep_id}\n")
        raise typer.Exit(130) from None
    _report(ended, out or plan.sweep_id, f"sweep {plan.sweep_id} on {ended[0].cluster}")
    raise typer.Exit(0 if all(r.state == "done" for r in ended) else 1)


def _report(records, out_dir: str, title: str) -> None:
    from . import report as rp
    from .follow import read_whole_log

    def text(record) -> str:
        try:
            return read_whole_log(record)
        except FileNotFoundError:
            return ""

    rows = rp.rows_for(records, text)
    written = rp.write(rows, out_dir, title)
    if not any(p.endswith(".png") for p in written):
        sys.stderr.write(f"hpc-launch: {rp.MATPLOTLIB_MISSING}\n")
    sys.stderr.write("hpc-launch: report: " + ", ".join(written) + "\n")


@app.command()
def report(
    job_ids: List[str] = typer.Argument(..., help="job ids, job arrays' ids or sweep ids", autocompletion=_complete_jobs),
    out: Optional[str] = typer.Option(None, "--out", "-o", help="the report's folder (default: ./report-FIRST_ID)"),
    cluster: Optional[str] = typer.Option(None, "--cluster", "-c", autocompletion=_complete_clusters),
) -> None:
    """Report finished jobs: a table (Markdown, CSV) and charts of throughput and memory per
    configuration; for one job also its loss and samples/s over steps (steps.png)."""
    from .jobs import find_jobs, refresh
    from .records import JobStore
    from .states import JobState

    store = JobStore()
    records = []
    for ident in job_ids:
        for r in find_jobs(store, ident, cluster):
            if r not in records:
                records.append(r)
    records = refresh(store, records, _transport_for)
    running = [r.job_id for r in records if not JobState(r.state).terminal]
    if running:
        raise HpcLaunchError(f"{len(running)} of the jobs have not ended yet ({', '.join(running[:5])})",
                             hint=f"wait for them (`hpc-launch logs -f {job_ids[0]}`), then report")
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in job_ids[0])
    _report(records, out or f"report-{safe}", f"report of {', '.join(job_ids)}")


def main(argv: Optional[List[str]] = None) -> None:
    try:  # typer >= 0.26 vendors click
        from typer._click import exceptions as click_exc
    except ImportError:  # pragma: no cover - older typer uses click itself
        from click import exceptions as click_exc  # type: ignore[no-redef]
    from typer.main import get_command

    if os.environ.get(COMPLETE_VAR):  # the shell asks for completions: typer's classes answer
        from typer._completion_classes import completion_init

        completion_init()
    command = get_command(app)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # from here on, Ctrl-C is KeyboardInterrupt
    try:
        rc = command.main(args=argv if argv is not None else sys.argv[1:], prog_name="hpc-launch", standalone_mode=False)
    except HpcLaunchError as exc:
        _err(exc.one_line())
        sys.exit(exc.exit_code)
    except click_exc.UsageError as exc:
        hint = f" (see `hpc-launch {exc.ctx.info_name if exc.ctx and exc.ctx.parent else ''} --help`)".replace("  ", " ")
        _err(" ".join(exc.format_message().split()) + hint)
        sys.exit(2)
    except getattr(click_exc, "Abort", KeyboardInterrupt):
        _err("aborted")
        sys.exit(130)
    except KeyboardInterrupt:
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)
    except Exception as exc:  # last resort: one line, the traceback only when asked for
        if os.environ.get("HPC_LAUNCH_DEBUG"):
            raise
        _err(f"{_describe(exc)} (HPC_LAUNCH_DEBUG=1 shows the traceback; please report it if the cause is unclear)")
        sys.exit(1)
    finally:
        _close_connections()
    sys.exit(rc if isinstance(rc, int) else 0)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        where = f" {exc.filename}" if exc.filename else ""
        return f"{exc.strerror}:{where}"
    if isinstance(exc, UnicodeDecodeError):
        return f"a file is not valid UTF-8 ({exc.reason} at byte {exc.start})"
    return " ".join(f"{type(exc).__name__}: {exc}".split())


def _close_connections() -> None:
    transport = sys.modules.get("hpc_launch.transport")
    if transport is not None:
        transport.close_all()


if __name__ == "__main__":
    main()
