"""`submit`, `sweep`, `rerun` and `where`: options in, one call to the core, the job id (or sweep id) out.
`submit`'s body is in submit_run.py, which the fast path (fast.py) calls too."""

from __future__ import annotations

import sys
from typing import Any, Dict, List, Optional

import typer

from ..protocol import EXIT_SIGINT
from .app import GPU_COUNT, app, complete_clusters, parse_env, run_checked, say, split_args, split_list, usage_errors
from .submit_run import Announcer, job_options, read_submit, show_dry_run


def _job_options(**given: Any) -> Dict[str, Any]:
    with usage_errors():
        return job_options(**given)


@app.command()
def submit(
    cluster: Optional[str] = typer.Option(
        None,
        "--cluster",
        "-c",
        metavar="NAME",
        autocompletion=complete_clusters,
        help="cluster profile name (default: local)",
    ),
    nodes: Optional[int] = typer.Option(
        None, "--nodes", "-n", metavar="N", help="number of nodes (default 1; pods: all --hosts)"
    ),
    gpus_per_node: Optional[int] = typer.Option(
        None,
        "--gpus-per-node",
        "-g",
        metavar="N",
        click_type=GPU_COUNT,
        help="GPUs (ranks) per node; default: all of the node's",
    ),
    queue: Optional[str] = typer.Option(
        None, "--queue", "-q", metavar="QUEUE", help="queue / partition / resource type"
    ),
    walltime: Optional[str] = typer.Option(None, "--walltime", "-t", metavar="TIME", help="HH:MM:SS (or 90m, 2h)"),
    group: Optional[str] = typer.Option(
        None, "--group", "--project", "-P", metavar="GROUP", help="accounting group/project, however the site spells it"
    ),
    name: Optional[str] = typer.Option(None, "--name", "-N", metavar="NAME", help="job name (the log is NAME.oJOBID)"),
    modules: Optional[str] = typer.Option(
        None, "--modules", metavar="A,B", help="comma-separated modules to load (replaces the profile's)"
    ),
    env: List[str] = typer.Option(
        [],
        "--env",
        "-e",
        metavar="NAME=VALUE",
        help="NAME=VALUE exported in the job (repeatable; written into the script)",
    ),
    pass_env: List[str] = typer.Option(
        [],
        "--pass-env",
        metavar="NAME",
        help="NAME of a variable set in this shell (a secret): the job gets it "
        "from a file only you can read (repeatable)",
    ),
    notify: Optional[str] = typer.Option(
        None,
        "--notify",
        metavar="NAME",
        help="NAME of a variable set in this shell holding a webhook URL (Slack, Mattermost, ntfy): "
        "the job posts its start and end there; the URL travels as a --pass-env secret",
    ),
    script: Optional[str] = typer.Option(
        None, "--script", metavar="FILE", help="your own training script instead of `python -m hpc_launch.train`"
    ),
    train_args: Optional[str] = typer.Option(
        None, "--train-args", metavar="'ARGS'", help="arguments for the training entrypoint, as one shell-quoted string"
    ),
    directive: List[str] = typer.Option(
        [],
        "--directive",
        "-d",
        metavar="'DIRECTIVE'",
        help="extra scheduler directive; replaces a default with the same key (repeatable)",
    ),
    hosts: Optional[str] = typer.Option(None, "--hosts", metavar="HOSTS", help="pods: comma-separated node names/IPs"),
    gather: Optional[int] = typer.Option(
        None,
        "--gather",
        metavar="PORT",
        help="pods: the other hosts' addresses come at start-up from `hpc-launch announce` on them",
    ),
    workdir: Optional[str] = typer.Option(
        None,
        "--workdir",
        metavar="DIR",
        help="where the job runs and logs (default: here, or ~/hpc-launch/NAME remotely)",
    ),
    venv: Optional[str] = typer.Option(None, "--venv", metavar="DIR", help="virtualenv to activate in the job"),
    login: Optional[str] = typer.Option(
        None,
        "--login",
        metavar="HOST",
        help="submit over SSH on this host (~/.ssh/config alias); `local` forces this machine",
    ),
    config: Optional[str] = typer.Option(
        None, "--config", metavar="FILE", help="project config file (default: ./hpc-launch.yaml if present)"
    ),
    profile: List[str] = typer.Option(
        [], "--profile", metavar="FILE", help="an extra cluster profile YAML file, merged last (repeatable)"
    ),
    stop_before: Optional[str] = typer.Option(
        None,
        "--stop-before",
        metavar="TIME",
        help="checkpoint and stop this long before the walltime (default: a tenth of it, 30 s to 5 min)",
    ),
    chain: Optional[int] = typer.Option(
        None,
        "--chain",
        metavar="N",
        help="N dependent jobs, each resuming from the newest checkpoint (for trainings longer than a walltime)",
    ),
    exclude: Optional[str] = typer.Option(
        None,
        "--exclude",
        "-x",
        metavar="HOSTS",
        help=(
            "keep the job off these hosts (comma-separated or a "
            "hostlist); hosts a job found bad are added by themselves"
        ),
    ),
    spares: Optional[int] = typer.Option(
        None,
        "--spares",
        metavar="K",
        help="hold K extra nodes and train on the first --nodes that pass the "
        "start-up check (for schedulers that cannot exclude hosts, e.g. PBS)",
    ),
    failover: Optional[int] = typer.Option(
        None,
        "--failover",
        metavar="N",
        help="hold N spare nodes; when the pre-flight gate or the watchdog finds a bad node, the ranks restart "
        "from the newest checkpoint on the healthy nodes plus a spare, in the same job (up to N times)",
    ),
    stage_env: bool = typer.Option(
        False,
        "--stage-env",
        help="copy the job's virtualenv to node-local storage (the profile's stage.dest) by a tree broadcast "
        "before the ranks start, and run them from the copy (docs/staging.md)",
    ),
    stage_data: Optional[str] = typer.Option(
        None,
        "--stage-data",
        metavar="DIR",
        help="a shared directory staged too; the job finds the copy in $HPC_LAUNCH_STAGED_DATA",
    ),
    no_stage: bool = typer.Option(False, "--no-stage", help="no node-local staging for this job, whatever the profile"),
    container: Optional[str] = typer.Option(
        None,
        "--container",
        metavar="IMAGE",
        help="run the ranks inside this image (a path where the job runs, or a registry name), "
        "started by the site's launcher as the profile's container: says (docs/containers.md)",
    ),
    no_preflight: bool = typer.Option(
        False,
        "--no-preflight",
        help="skip the pre-flight gate the ranks pass before training (the entrypoint's and a --script's: "
        "docs/preflight.md)",
    ),
    stop_signal: Optional[str] = typer.Option(
        None,
        "--stop-signal",
        metavar="SIG",
        help="the signal each rank of a --script gets at --stop-before (default USR1; also USR2, HUP, URG, XCPU): "
        "docs/rank-layer.md",
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="print the script (stdout) and the submit command (stderr); touch nothing"
    ),
    follow: bool = typer.Option(
        False, "--follow", "-f", help="follow the log until the job ends; exit with its exit code"
    ),
    show_all: bool = typer.Option(
        False, "--all", "-a", help="with --follow: every line, the frameworks' chatter too (the log file always has it)"
    ),
    no_check: bool = typer.Option(
        False,
        "--no-check",
        help="submit without asking the scheduler to validate the job first (sbatch --test-only, qsub -w v)",
    ),
) -> None:
    """Render the job script for a cluster and submit it (or print it with --dry-run)."""
    run_checked(read_submit, dict(locals()))  # every parameter above, by name, as the fast path passes them


@app.command()
def sweep(
    cluster: Optional[str] = typer.Option(
        None,
        "--cluster",
        "-c",
        metavar="NAME",
        autocompletion=complete_clusters,
        help="cluster profile name (default: local)",
    ),
    zero: Optional[str] = typer.Option(None, "--zero", metavar="0,1,2,3", help="ZeRO stages, comma-separated: 0,1,2,3"),
    offload: Optional[str] = typer.Option(
        None, "--offload", metavar="LIST", help="offloads: none,optimizer,optimizer+params"
    ),
    precision: Optional[str] = typer.Option(None, "--precision", metavar="LIST", help="precisions: fp32,bf16,fp16"),
    nodes: Optional[str] = typer.Option(None, "--nodes", "-n", metavar="N", help="node counts, comma-separated"),
    micro_batch: Optional[str] = typer.Option(
        None, "--micro-batch", metavar="N,N", help="per-rank micro-batches, comma-separated"
    ),
    grid: Optional[str] = typer.Option(
        None, "--grid", metavar="FILE", help="a YAML sweep file: axes (lists) and/or points: (flags win over its axes)"
    ),
    train_args: Optional[str] = typer.Option(
        None, "--train-args", metavar="'ARGS'", help="the other training arguments, shared by every point"
    ),
    gpus_per_node: Optional[int] = typer.Option(
        None, "--gpus-per-node", "-g", metavar="N", click_type=GPU_COUNT, help="GPUs (ranks) per node"
    ),
    queue: Optional[str] = typer.Option(
        None, "--queue", "-q", metavar="QUEUE", help="queue / partition / resource type"
    ),
    walltime: Optional[str] = typer.Option(None, "--walltime", "-t", metavar="TIME", help="per point"),
    group: Optional[str] = typer.Option(
        None, "--group", "--project", "-P", metavar="GROUP", help="accounting group/project"
    ),
    name: str = typer.Option(
        "sweep", "--name", "-N", metavar="NAME", help="job name; the sweep's id is NAME-TIMESTAMP"
    ),
    env: List[str] = typer.Option(
        [], "--env", "-e", metavar="NAME=VALUE", help="NAME=VALUE exported in every job (repeatable)"
    ),
    directive: List[str] = typer.Option(
        [], "--directive", "-d", metavar="'DIRECTIVE'", help="extra scheduler directive (repeatable)"
    ),
    workdir: Optional[str] = typer.Option(None, "--workdir", metavar="DIR", help="where the jobs run and log"),
    venv: Optional[str] = typer.Option(None, "--venv", metavar="DIR", help="virtualenv to activate in the jobs"),
    login: Optional[str] = typer.Option(
        None, "--login", metavar="HOST", help="submit over SSH on this host (~/.ssh/config alias)"
    ),
    container: Optional[str] = typer.Option(
        None,
        "--container",
        metavar="IMAGE",
        help="run every point's ranks inside this image (docs/containers.md)",
    ),
    config: Optional[str] = typer.Option(
        None, "--config", metavar="FILE", help="project config file (default: ./hpc-launch.yaml if present)"
    ),
    profile: List[str] = typer.Option(
        [], "--profile", metavar="FILE", help="an extra cluster profile YAML file, merged last (repeatable)"
    ),
    separate: bool = typer.Option(False, "--separate", help="one job per point even where the scheduler has arrays"),
    pack: bool = typer.Option(
        False, "--pack", help="every point inside ONE job (one queue wait), one after another; -t is that job's"
    ),
    resume: Optional[str] = typer.Option(
        None, "--resume", metavar="SWEEP_ID", help="with --pack: run the points a cut packed sweep did not finish"
    ),
    out: Optional[str] = typer.Option(
        None, "--out", "-o", metavar="DIR", help="the report's folder (default: ./SWEEP_ID)"
    ),
    no_wait: bool = typer.Option(False, "--no-wait", help="submit and return; `hpc-launch report SWEEP_ID` later"),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="check every point and print what would be submitted; submit nothing"
    ),
) -> None:
    """Run a grid of DeepSpeed configurations (ZeRO stage, offload, precision, nodes, micro-batch) and report them.

    Every point is checked first (batch arithmetic, DeepSpeed's config validator, plan's memory
    estimators); one impossible point refuses the sweep. Submits one job array where the scheduler
    has arrays and all points ask for the same nodes, else one job per point; waits for all; writes
    report.md, report.csv, throughput.png and memory.png."""
    from .. import sweep as sw
    from ..project_config import spec_for

    axes: dict = {}
    points: list = []
    if grid:
        axes, points = sw.load_grid_file(grid)
    for axis, raw in (
        ("zero", zero),
        ("offload", offload),
        ("precision", precision),
        ("nodes", nodes),
        ("micro_batch", micro_batch),
    ):
        if raw is not None:
            axes[axis] = sw.axis_values(axis, raw, f"--{axis.replace('_', '-')}")
    values = sw.expand(axes, points, note=say)
    spec = spec_for(
        config,
        dict(
            cluster=cluster,
            gpus_per_node=gpus_per_node,
            queue=queue,
            walltime=walltime,
            group=group,
            name=name,
            env=parse_env(env),
            train_args=split_args(train_args),
            directives=list(directive),
            workdir=workdir,
            venv=venv,
            login=login,
            container=container,
        ),
    )

    def announce_id(sweep_id: str) -> None:
        sys.stdout.write(sweep_id + "\n")
        sys.stdout.flush()

    ui = sw.Run(
        say=say, line=lambda text: sys.stderr.write(text + "\n"), announce_id=announce_id, show_script=sys.stdout.write
    )
    try:
        code = sw.run(
            spec,
            values,
            ui,
            profile_file=profile,
            separate=separate,
            out=out,
            no_wait=no_wait,
            dry_run=dry_run,
            pack=pack,
            resume=resume,
        )
    except KeyboardInterrupt:
        raise typer.Exit(EXIT_SIGINT) from None
    raise typer.Exit(code)


@app.command()
def tune(
    cluster: Optional[str] = typer.Option(
        None,
        "--cluster",
        "-c",
        metavar="NAME",
        autocompletion=complete_clusters,
        help="cluster profile name (default: local)",
    ),
    zero: str = typer.Option("1,2,3", "--zero", metavar="0,1,2,3", help="ZeRO stages to try, comma-separated"),
    offload: str = typer.Option("none", "--offload", metavar="LIST", help="offloads: none,optimizer,optimizer+params"),
    micro_batch: str = typer.Option(
        "1-256", "--micro-batch", metavar="LOW-HIGH", help="the micro-batch range bisected for each choice"
    ),
    mem_limit: Optional[float] = typer.Option(
        None,
        "--mem-limit",
        metavar="GIB",
        help="a trial whose rank's peak memory (peak RSS on CPU) goes above this counts as out of memory",
    ),
    train_args: Optional[str] = typer.Option(
        None, "--train-args", metavar="'ARGS'", help="the other training arguments, shared by every trial"
    ),
    nodes: Optional[int] = typer.Option(None, "--nodes", "-n", metavar="N", help="nodes of the one job"),
    gpus_per_node: Optional[int] = typer.Option(
        None, "--gpus-per-node", "-g", metavar="N", click_type=GPU_COUNT, help="GPUs (ranks) per node"
    ),
    queue: Optional[str] = typer.Option(
        None, "--queue", "-q", metavar="QUEUE", help="queue / partition / resource type"
    ),
    walltime: Optional[str] = typer.Option(None, "--walltime", "-t", metavar="TIME", help="the one job's, all trials"),
    group: Optional[str] = typer.Option(
        None, "--group", "--project", "-P", metavar="GROUP", help="accounting group/project"
    ),
    name: str = typer.Option("tune", "--name", "-N", metavar="NAME", help="job name; the tune's id is NAME-TIMESTAMP"),
    env: List[str] = typer.Option(
        [], "--env", "-e", metavar="NAME=VALUE", help="NAME=VALUE exported in the job (repeatable)"
    ),
    workdir: Optional[str] = typer.Option(None, "--workdir", metavar="DIR", help="where the job runs and logs"),
    venv: Optional[str] = typer.Option(None, "--venv", metavar="DIR", help="virtualenv to activate in the job"),
    login: Optional[str] = typer.Option(
        None, "--login", metavar="HOST", help="submit over SSH on this host (~/.ssh/config alias)"
    ),
    config: Optional[str] = typer.Option(
        None, "--config", metavar="FILE", help="project config file (default: ./hpc-launch.yaml if present)"
    ),
    profile: List[str] = typer.Option(
        [], "--profile", metavar="FILE", help="an extra cluster profile YAML file, merged last (repeatable)"
    ),
    resume: Optional[str] = typer.Option(
        None, "--resume", metavar="TUNE_ID", help="go on with a cut tune: its journal's trials are not run again"
    ),
    out: Optional[str] = typer.Option(
        None, "--out", "-o", metavar="DIR", help="the report's folder (default: ./TUNE_ID)"
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="check and print the job; submit nothing"),
) -> None:
    """Find the largest micro-batch that fits per ZeRO stage / offload, then the fastest, inside ONE job.

    Bisection on out of memory for each choice (at most log2(HIGH-LOW)+2 trials), every trial a row
    of the report (out-of-memory ones with state oom); writes tune.md, ds_config.json (the winner's
    DeepSpeed config) and the `hpc-launch submit` line that uses it (docs/tune.md)."""
    from .. import sweep as sw
    from .. import tune as tn
    from ..project_config import spec_for

    spec = spec_for(
        config,
        dict(
            cluster=cluster,
            nodes=nodes,
            gpus_per_node=gpus_per_node,
            queue=queue,
            walltime=walltime,
            group=group,
            name=name,
            env=parse_env(env),
            train_args=split_args(train_args),
            workdir=workdir,
            venv=venv,
            login=login,
        ),
    )
    tp = tn.plan(
        spec,
        sw.axis_values("zero", zero, "--zero"),
        sw.axis_values("offload", offload, "--offload"),
        tn.parse_range(micro_batch),
        mem_limit_gb=mem_limit,
        profile_file=profile,
        resume=resume,
    )

    def announce_id(tune_id: str) -> None:
        sys.stdout.write(tune_id + "\n")
        sys.stdout.flush()

    ui = sw.Run(
        say=say, line=lambda text: sys.stderr.write(text + "\n"), announce_id=announce_id, show_script=sys.stdout.write
    )
    try:
        code = tn.run(tp, spec, ui, out=out, dry_run=dry_run)
    except KeyboardInterrupt:
        raise typer.Exit(EXIT_SIGINT) from None
    raise typer.Exit(code)


@app.command()
def rerun(
    job_id: str = typer.Argument(..., metavar="JOB_ID", help="the job to run again (as printed by submit)"),
    cluster: Optional[str] = typer.Option(
        None,
        "--cluster",
        "-c",
        metavar="NAME",
        autocompletion=complete_clusters,
        help="where to run it (default: the job's own cluster)",
    ),
    from_cluster: Optional[str] = typer.Option(
        None, "--from", metavar="NAME", help="the job's cluster, when its id exists on several"
    ),
    nodes: Optional[int] = typer.Option(
        None, "--nodes", "-n", metavar="N", help="number of nodes (default: the job's)"
    ),
    gpus_per_node: Optional[int] = typer.Option(
        None,
        "--gpus-per-node",
        "-g",
        metavar="N",
        click_type=GPU_COUNT,
        help="GPUs (ranks) per node (default: the job's, if the node has them)",
    ),
    queue: Optional[str] = typer.Option(
        None, "--queue", "-q", metavar="QUEUE", help="queue / partition / resource type"
    ),
    walltime: Optional[str] = typer.Option(
        None, "--walltime", "-t", metavar="TIME", help="HH:MM:SS (default: the job's)"
    ),
    group: Optional[str] = typer.Option(
        None, "--group", "--project", "-P", metavar="GROUP", help="accounting group/project on the new cluster"
    ),
    name: Optional[str] = typer.Option(None, "--name", "-N", metavar="NAME", help="job name (default: the job's)"),
    modules: Optional[str] = typer.Option(
        None, "--modules", metavar="A,B", help="modules to load (default: the new cluster's profile's)"
    ),
    env: List[str] = typer.Option(
        [], "--env", "-e", metavar="NAME=VALUE", help="NAME=VALUE exported in the job, besides the job's (repeatable)"
    ),
    pass_env: List[str] = typer.Option(
        [], "--pass-env", metavar="NAME", help="another secret's NAME, besides the job's (repeatable)"
    ),
    script: Optional[str] = typer.Option(
        None, "--script", metavar="FILE", help="this script instead of the capsule's copy of the job's code"
    ),
    train_args: Optional[str] = typer.Option(
        None, "--train-args", metavar="'ARGS'", help="training arguments instead of the job's"
    ),
    directive: List[str] = typer.Option(
        [], "--directive", "-d", metavar="'DIRECTIVE'", help="extra scheduler directive (repeatable)"
    ),
    hosts: Optional[str] = typer.Option(None, "--hosts", metavar="HOSTS", help="pods: comma-separated node names/IPs"),
    workdir: Optional[str] = typer.Option(None, "--workdir", metavar="DIR", help="where the job runs and logs"),
    venv: Optional[str] = typer.Option(None, "--venv", metavar="DIR", help="virtualenv to activate in the job"),
    login: Optional[str] = typer.Option(None, "--login", metavar="HOST", help="submit over SSH on this host"),
    profile: List[str] = typer.Option(
        [], "--profile", metavar="FILE", help="an extra cluster profile YAML file, merged last (repeatable)"
    ),
    container: Optional[str] = typer.Option(
        None,
        "--container",
        metavar="IMAGE",
        help="run the ranks inside this image (default: the job's image, from its capsule)",
    ),
    chain: Optional[int] = typer.Option(None, "--chain", metavar="N", help="N dependent jobs (default: the job's)"),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="print the script (stdout) and the submit command (stderr); touch nothing"
    ),
) -> None:
    """Submit a job's training again, from its capsule, on another cluster (or the same): its code, training \
arguments, nodes and walltime; modules, venv, queue and group from the new cluster's profile and your options."""
    from ..jobs import RerunUI, rerun as rerun_job
    from ..records import JobStore

    announce = Announcer()
    options = _job_options(
        cluster=cluster,
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        queue=queue,
        walltime=walltime,
        group=group,
        name=name,
        modules=modules,
        env=env,
        pass_env=pass_env,
        script=script,
        train_args=train_args,
        directives=directive,
        hosts=hosts,
        workdir=workdir,
        venv=venv,
        login=login,
        chain=chain,
        container=container,
    )
    try:
        rerun_job(
            JobStore(),
            job_id,
            options,
            RerunUI(say=say, dry_run=show_dry_run, on_recorded=announce),
            from_cluster=from_cluster,
            profile_file=profile,
            dry_run=dry_run,
        )
    except KeyboardInterrupt:
        raise typer.Exit(announce.interrupted()) from None


@app.command()
def where(
    cluster: List[str] = typer.Option(
        [],
        "--cluster",
        "-c",
        metavar="A,B",
        autocompletion=complete_clusters,
        help="the clusters to ask (repeatable or comma-separated; default: the project's, else local)",
    ),
    nodes: Optional[int] = typer.Option(None, "--nodes", "-n", metavar="N", help="number of nodes (default 1)"),
    gpus_per_node: Optional[int] = typer.Option(
        None,
        "--gpus-per-node",
        "-g",
        metavar="N",
        click_type=GPU_COUNT,
        help="GPUs (ranks) per node; default: all of the node's",
    ),
    queue: Optional[str] = typer.Option(
        None, "--queue", "-q", metavar="QUEUE", help="queue / partition / resource type"
    ),
    walltime: Optional[str] = typer.Option(None, "--walltime", "-t", metavar="TIME", help="HH:MM:SS (or 90m, 2h)"),
    group: Optional[str] = typer.Option(
        None, "--group", "--project", "-P", metavar="GROUP", help="accounting group/project, however the site spells it"
    ),
    name: Optional[str] = typer.Option(None, "--name", "-N", metavar="NAME", help="job name"),
    modules: Optional[str] = typer.Option(None, "--modules", metavar="A,B", help="comma-separated modules to load"),
    env: List[str] = typer.Option([], "--env", "-e", metavar="NAME=VALUE", help="NAME=VALUE exported in the job"),
    pass_env: List[str] = typer.Option(
        [],
        "--pass-env",
        metavar="NAME",
        help="NAME of a variable set in this shell (a secret), as submit takes it (repeatable)",
    ),
    notify: Optional[str] = typer.Option(
        None,
        "--notify",
        metavar="NAME",
        help="NAME of a variable set in this shell holding a webhook URL, as submit takes it",
    ),
    script: Optional[str] = typer.Option(None, "--script", metavar="FILE", help="your own training script"),
    train_args: Optional[str] = typer.Option(
        None, "--train-args", metavar="'ARGS'", help="arguments for the training entrypoint"
    ),
    directive: List[str] = typer.Option(
        [], "--directive", "-d", metavar="'DIRECTIVE'", help="extra scheduler directive (repeatable)"
    ),
    hosts: Optional[str] = typer.Option(None, "--hosts", metavar="HOSTS", help="pods: comma-separated node names/IPs"),
    workdir: Optional[str] = typer.Option(None, "--workdir", metavar="DIR", help="where the job would run and log"),
    venv: Optional[str] = typer.Option(None, "--venv", metavar="DIR", help="virtualenv to activate in the job"),
    login: Optional[str] = typer.Option(None, "--login", metavar="HOST", help="ask over SSH on this host"),
    container: Optional[str] = typer.Option(
        None,
        "--container",
        metavar="IMAGE",
        help="the ranks would run inside this image (the profile's container: is checked)",
    ),
    config: Optional[str] = typer.Option(
        None, "--config", metavar="FILE", help="project config file (default: ./hpc-launch.yaml if present)"
    ),
    profile: List[str] = typer.Option(
        [], "--profile", metavar="FILE", help="an extra cluster profile YAML file, merged last (repeatable)"
    ),
    exclude: Optional[str] = typer.Option(
        None, "--exclude", "-x", metavar="HOSTS", help="keep the job off these hosts"
    ),
    spares: Optional[int] = typer.Option(None, "--spares", metavar="K", help="hold K extra nodes"),
    as_json: bool = typer.Option(False, "--json", help="a JSON list, one object per cluster"),
    submit_first: bool = typer.Option(
        False,
        "--submit",
        help="submit to every cluster that takes the job; the first to start trains, the others are cancelled",
    ),
    no_wait: bool = typer.Option(
        False, "--no-wait", help="with --submit: return once submitted (each job's start gate still lets one train)"
    ),
) -> None:
    """When and where the same job would start on each cluster, WITHOUT submitting: the queue, its \
limits, the scheduler's estimate where it gives one before submitting (Slurm's sbatch --test-only), \
or why a cluster refuses the job. Nothing is submitted, recorded or left behind. With --submit: \
the job goes to each cluster, the first to start trains and the others are cancelled (one copy)."""
    from ..jobs import where as where_job, where_line
    from ..project_config import spec_for
    from .app import print_json

    options = _job_options(
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        queue=queue,
        walltime=walltime,
        group=group,
        name=name,
        modules=modules,
        env=env,
        pass_env=pass_env,
        notify=notify,
        script=script,
        train_args=train_args,
        directives=directive,
        hosts=hosts,
        workdir=workdir,
        venv=venv,
        login=login,
        exclude=exclude,
        spares=spares,
        container=container,
    )
    clusters = [c for item in cluster for c in split_list(item) or []]
    if not clusters:
        clusters = [spec_for(config, dict(options, cluster=None)).cluster or "local"]
    if submit_first:
        raise typer.Exit(_first_start(clusters, lambda c: spec_for(config, dict(options, cluster=c)), profile, no_wait))
    answers = where_job(clusters, lambda c: spec_for(config, dict(options, cluster=c)), profile_file=profile, note=say)
    if as_json:
        print_json([a.as_dict() for a in answers])
    else:
        width = max(len(a.cluster) for a in answers)
        for a in answers:
            print(where_line(a, width))
    if not any(a.estimate for a in answers):  # no cluster takes the job: 3 if one could not be asked
        raise typer.Exit(3 if any(a.error for a in answers) else 2)


def _first_start(clusters: List[str], spec_of, profile: List[str], no_wait: bool) -> int:
    """`where --submit`: the group id on stdout, each cluster's job (or refusal) and the outcome on stderr."""
    from ..jobs.first_start import Interrupted, run

    group = ""

    def submitted(ident: str, entrants) -> None:
        nonlocal group
        group = ident
        print(ident, flush=True)
        for e in entrants:
            say(f"{e.cluster}: job {e.record.job_id}" if e.record else f"{e.cluster}: not submitted: {e.refused}")

    try:
        _, _, winner = run(clusters, spec_of, profile_file=profile, wait=not no_wait, note=say, on_submitted=submitted)
    except Interrupted as stopped:
        if not stopped.submitted:
            say("interrupted: nothing was submitted or recorded")
            return EXIT_SIGINT
        submitted(stopped.group, stopped.submitted)
        say(
            f"interrupted: nothing more is submitted; the {len(stopped.submitted)} job(s) of {stopped.group} above "
            f"stay queued and the first to start trains (its gate stops the others). `hpc-launch status "
            f"{stopped.group}` shows them, `hpc-launch cancel {stopped.group}` ends them"
        )
        return EXIT_SIGINT
    except KeyboardInterrupt:
        if group:
            say(
                f"interrupted: the jobs of {group} stay queued and the first to start trains (its gate stops "
                f"the others). `hpc-launch status {group}` shows them, `hpc-launch cancel {group}` ends them"
            )
        return EXIT_SIGINT
    if no_wait:
        return 0
    if winner is None:
        say(f"no job of {group} started its training: `hpc-launch status {group}` says how each ended")
        return 1
    say(f"follow it: hpc-launch logs -f {winner.job_id} --cluster {winner.cluster}")
    return 0
