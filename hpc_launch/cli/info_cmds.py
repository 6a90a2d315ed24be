"""Commands that need no job record: hostfile and announce (inside a job), clusters, plan, completion."""

from __future__ import annotations

import sys
from typing import Any, List, Optional

import typer

from .app import (
    COMPLETE_VAR,
    app,
    clusters_app,
    err,
    print_json,
    print_table,
    run_checked,
)
from .declare import command, option
from .hostfile_run import read_hostfile


@command("hostfile")
def hostfile(**v: Any) -> None:
    """Inside a job: the DeepSpeed hostfile from the scheduler's node list."""
    run_checked(read_hostfile, v)  # its parameters by name, as the fast path passes them


@app.command()
def announce(
    target: str = typer.Argument(..., metavar="HOST:PORT", help="the first pod and the job's --gather port"),
    name: Optional[str] = typer.Option(
        None, "--name", metavar="NAME", help="this host's name as the job's --hosts lists it (default: hostname)"
    ),
    address: Optional[str] = typer.Option(
        None,
        "--address",
        metavar="ADDR",
        help="the address the others reach this host at (default: the one that reaches HOST)",
    ),
    timeout: float = typer.Option(
        120.0, "--timeout", metavar="SECONDS", help="seconds to keep trying while the job has not started listening"
    ),
) -> None:
    """On a worker pod: tell a `--gather` job starting on HOST this pod's name and address."""
    from ..gather import Refused
    from ..gather import announce as send

    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        raise typer.BadParameter(f"{target!r} is not HOST:PORT (e.g. 10.0.0.11:29400)", param_hint="HOST:PORT")
    try:
        who, where = send(host, int(port), name=name, address=address, timeout=timeout)
    except (Refused, TimeoutError) as exc:
        err(f"{exc}")
        raise typer.Exit(1) from None
    sys.stderr.write(f"announced {who} at {where} to {target}\n")


@clusters_app.callback()
def clusters_list(
    ctx: typer.Context, json_: bool = typer.Option(False, "--json", help="the list as JSON (keys: docs/commands.md)")
) -> None:
    """List the known clusters."""
    if ctx.invoked_subcommand:
        return
    from ..site import profiles

    rows = profiles.summaries()
    if json_:
        print_json(rows)
        return
    print_table(
        ("name", "scheduler", "GPUs", "launcher", "status", "title"),
        [
            (r["name"], "-", "-", "-", "broken", r["error"])
            if r["status"] == "broken"
            else (r["name"], r["scheduler"], str(r["gpus_per_node"]), r["launcher"], r["status"], r["title"])
            for r in rows
        ],
        fit="title",  # one line per cluster at any width (`clusters show NAME` has it all)
    )
    for r in rows:  # a broken profile's whole error, which its title cell cuts
        if r["status"] == "broken":
            sys.stdout.write(f"{r['name']}: {r['error']}\n")


@clusters_app.command("show")
def clusters_show(
    name: str = typer.Argument(..., metavar="CLUSTER", help="cluster name"),
    profile: List[str] = typer.Option(
        [], "--profile", metavar="FILE", help="an extra cluster profile YAML file, merged last (repeatable)"
    ),
) -> None:
    """Print one cluster profile, resolved (defaults filled, user overrides merged) as YAML."""
    from ..site import profiles

    sys.stdout.write(profiles.resolved_yaml(name, profile_file=profile))


@app.command()
def plan(
    model: str = typer.Option(
        "resnet50",
        "--model",
        "-m",
        metavar="MODEL",
        help="torchvision model name, a language model size (gpt-125m, t5-small, ...) or a model directory",
    ),
    cluster: str = option("cluster", "cluster profile name", "abci"),
    nodes: int = option("nodes", "number of nodes", 1),
    gpus_per_node: Optional[int] = option("gpus_per_node", "GPUs per node (default: the queue's)"),
    queue: Optional[str] = option("queue", "queue / partition / resource type"),
    seq_len: Optional[int] = typer.Option(
        None, "--seq-len", metavar="N", min=1, help="language models: tokens per sample (the entrypoint's default)"
    ),
    micro_batch: Optional[int] = typer.Option(
        None,
        "--micro-batch",
        metavar="N",
        min=1,
        help="language models: per-GPU micro-batch (the entrypoint's default)",
    ),
    precision: str = typer.Option(
        "bf16", "--precision", metavar="P", help="language models' activations: bf16, fp16, fp32"
    ),
    json_: bool = typer.Option(False, "--json", help="the plan as JSON (keys: docs/commands.md)"),
) -> None:
    """Per-GPU memory under each ZeRO stage (DeepSpeed's estimators), and a recommendation.

    Model states per ZeRO stage and offload; for a language model also its activations at --seq-len
    and --micro-batch."""
    from ..plan import format_plan, plan_for_cluster  # torch and deepspeed only inside

    if precision not in ("bf16", "fp16", "fp32"):
        raise typer.BadParameter(f"{precision!r}: use bf16, fp16 or fp32", param_hint="--precision")
    result = plan_for_cluster(model, cluster, nodes, gpus_per_node, queue, seq_len, micro_batch, precision)
    if json_:
        import dataclasses

        print_json(dataclasses.asdict(result))
    else:
        sys.stdout.write(format_plan(result) + "\n")


@app.command()
def completion(shell: str = typer.Argument(..., metavar="SHELL", help="bash, zsh or fish")) -> None:
    """Print the shell completion script (commands, options, cluster names, job ids).

    bash: `source <(hpc-launch completion bash)` in ~/.bashrc; zsh: the same in ~/.zshrc;
    fish: `hpc-launch completion fish > ~/.config/fish/completions/hpc-launch.fish`."""
    from typer._completion_shared import get_completion_script

    if shell not in ("bash", "zsh", "fish"):
        raise typer.BadParameter(f"{shell!r}: use bash, zsh or fish", param_hint="SHELL")
    sys.stdout.write(get_completion_script(prog_name="hpc-launch", complete_var=COMPLETE_VAR, shell=shell) + "\n")
