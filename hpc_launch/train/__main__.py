"""`python -m hpc_launch.train` / `hpc-train`: the DeepSpeed training entrypoint every job script calls."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys

from hpc_launch import protocol, start_gc
from hpc_launch.one_line import say

from .ds_config import BF16_MODES, OFFLOADS, PRECISIONS
from .errors import TrainError
from .lm_sizes import DEFAULT_SEQ_LEN, LM_SIZES
from .models import MEMORY_FORMATS
from .monitor import MONITORS, parse_monitors


def _monitors(text: str) -> tuple:
    try:
        return parse_monitors(text)
    except TrainError as err:  # argparse's own one-line usage error, as for any other bad option
        raise argparse.ArgumentTypeError(err.one_line()) from None


def _add_model_and_data(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model",
        default="resnet50",
        help="smallcnn, any torchvision classification model, a language model size "
        f"({', '.join(LM_SIZES)}), a local model directory (config.json, weights, tokenizer), or your own: "
        "pkg.module:factory returning an nn.Module, (model, dataset) or (model, dataset, loss_fn)",
    )
    p.add_argument(
        "--data",
        default="synthetic",
        help="synthetic | digits | cifar10:DIR (cifar-10-batches-py) | ImageFolder root (ROOT/train, ROOT/val); "
        "language models: "
        'synthetic-tokens | a local .txt or .jsonl ({"text": ...} per line) file; '
        "your own: pkg.module:factory returning a Dataset or (train, val)",
    )
    p.add_argument(
        "--seq-len", type=int, default=None, help=f"language models: tokens per sample (default {DEFAULT_SEQ_LEN})"
    )
    p.add_argument(
        "--tokenizer",
        default=None,
        help="language models on a text file: a local tokenizer directory (default: the model directory's, else bytes)",
    )


def _add_length_and_batch(p: argparse.ArgumentParser) -> None:
    length = p.add_mutually_exclusive_group()
    length.add_argument("--steps", type=int, default=None, help="optimizer steps (default: --epochs 1)")
    length.add_argument("--epochs", type=int, default=None)
    p.add_argument("--micro-batch", type=int, default=None, help="per-rank micro-batch (default 32)")
    p.add_argument("--grad-accum", type=int, default=None, help="gradient accumulation steps")
    p.add_argument("--global-batch", type=int, default=None, help="= micro-batch x grad-accum x world size")


def _add_deepspeed_and_checkpoints(p: argparse.ArgumentParser) -> None:
    p.add_argument("--zero", type=int, default=2, choices=(0, 1, 2, 3), help="ZeRO stage")
    p.add_argument("--offload", default="none", choices=OFFLOADS)
    p.add_argument("--precision", default="fp32", choices=PRECISIONS)
    p.add_argument("--ds-config", default=None, help="DeepSpeed JSON; its keys win over the presets")
    p.add_argument("--checkpoint-dir", default=None)
    p.add_argument("--checkpoint-every", type=int, default=0, help="steps between checkpoints (0: only at the end)")
    p.add_argument("--resume", default="auto", help="auto | never | PATH (checkpoint dir or global_stepN folder)")


def _add_training_settings(p: argparse.ArgumentParser) -> None:
    """Logging pace, learning rate, data loading, memory layout, bf16's form, seed."""
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument(
        "--num-workers",
        type=int,
        default=None,
        help="DataLoader workers per rank (default: 4 for image folders, 0 for in-memory data)",
    )
    p.add_argument(
        "--memory-format",
        default="auto",
        choices=MEMORY_FORMATS,
        help="layout of a convolutional model and its images; auto: channels_last on CPUs and in bf16/fp16",
    )
    p.add_argument(
        "--bf16-mode",
        default="auto",
        choices=BF16_MODES,
        help="bf16 as DeepSpeed's bf16 weights or as torch autocast over fp32 weights; "
        "auto: autocast for models with BatchNorm on accelerators",
    )
    p.add_argument("--seed", type=int, default=0)


def _add_monitors(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--monitor",
        default="none",
        type=_monitors,
        help=f"{' | '.join(MONITORS)}, or several joined by commas; one TensorBoard step axis and one W&B run "
        "across chain links and resumes; W&B offline without WANDB_API_KEY or internet (docs/training.md)",
    )
    p.add_argument("--monitor-dir", default="runs", help="output folder of the csv/tensorboard/wandb monitors")
    p.add_argument("--job-name", default="hpc-train")


def _add_synthetic_eval_and_tools(p: argparse.ArgumentParser) -> None:
    """Image and synthetic data's shape, evaluation, the informational modes, the launcher's own flag."""
    p.add_argument(
        "--image-size", type=int, default=None, help="default: 224 image folders, 32 synthetic and cifar10, 8 digits"
    )
    p.add_argument("--num-classes", type=int, default=10, help="classes of the synthetic dataset")
    p.add_argument("--synthetic-samples", type=int, default=4096)
    p.add_argument("--no-eval", action="store_true", help="skip held-out accuracy at the end")
    p.add_argument("--eval-limit", type=int, default=None, help="evaluate on the first N validation samples")
    p.add_argument(
        "--print-config",
        action="store_true",
        help="print the resolved, DeepSpeed-validated config for --world-size ranks and exit",
    )
    p.add_argument("--world-size", type=int, default=None, help="with --print-config: ranks to check for")
    p.add_argument("--list-models", action="store_true")
    # Appended by the deepspeed launcher; the rank itself comes from the environment (hpc_launch/train/dist.py).
    p.add_argument("--local_rank", "--local-rank", dest="local_rank", type=int, default=None, help=argparse.SUPPRESS)


def _parser() -> argparse.ArgumentParser:
    """The options in the order --help lists them."""
    p = argparse.ArgumentParser(
        prog="python -m hpc_launch.train", description=__doc__, formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    _add_model_and_data(p)
    _add_length_and_batch(p)
    _add_deepspeed_and_checkpoints(p)
    _add_training_settings(p)
    _add_monitors(p)
    _add_synthetic_eval_and_tools(p)
    return p


def _settle_defaults(args: argparse.Namespace) -> argparse.Namespace:
    """The defaults that depend on other options or on the job, and the counts that must be at least 1."""
    if args.steps is None and args.epochs is None:
        args.epochs = 1
    for name in ("steps", "epochs", "log_every", "seq_len"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise TrainError(f"--{name.replace('_', '-')} must be at least 1")
    # the job script names a checkpoint dir for chained jobs (--chain): links resume from it
    args.checkpoint_dir = args.checkpoint_dir or os.environ.get("HPC_LAUNCH_CHECKPOINT_DIR") or None
    if args.num_workers is None:
        in_memory = args.data in ("synthetic", "digits", "synthetic-tokens") or args.data.endswith((".txt", ".jsonl"))
        # a factory's dataset (hpc_launch/train/factory.py) is the user's: in the process unless they ask for workers
        args.num_workers = 0 if in_memory or ":" in args.data or ":" in args.model else 4
    return args


def parse_args(argv=None) -> argparse.Namespace:
    return _settle_defaults(_parser().parse_args(argv))


def _print_config(args) -> int:
    from .run_plan import resolve_config

    args.total_steps = args.steps or 1000
    with contextlib.redirect_stdout(sys.stderr):  # DeepSpeed logs to stdout; keep stdout pure JSON
        cfg = resolve_config(args, args.world_size or 1)
    print(json.dumps(cfg, indent=2))
    return 0


def main(argv=None) -> int:
    rank = 0
    try:
        args = parse_args(argv)
        if args.list_models:
            from .models import SMALL_MODELS, torchvision_models

            print("\n".join(list(SMALL_MODELS) + list(LM_SIZES) + torchvision_models()))
            return 0
        if args.print_config:
            return _print_config(args)
        from . import dist
        from .trainer import run

        rank = dist.discover().rank
        try:
            return run(args)
        finally:
            from .monitor import close_open

            close_open()  # the W&B run's files completed: entry() leaves without interpreter teardown
    except TrainError as err:
        if rank == 0 or getattr(err, "every_rank", False):  # one line, once per job (every rank finds the same error)
            say(f"error: {err.one_line()}")
        if err.exit_code == protocol.EXIT_PREFLIGHT:
            protocol.report_verdict(err.exit_code)
        return err.exit_code


def entry() -> None:
    """Run, then leave without interpreter teardown.

    Threads owned by torch/DeepSpeed C++ extensions (gloo, shm_comm) can abort the process while
    Python tears down after the work is done ("terminate called without an active exception",
    seen on the testbed as a rank killed with SIGABRT after its last step). Checkpoints are saved
    synchronously and output is flushed here, so skipping the teardown loses nothing.
    """
    start_gc.relax()  # until the first step (the trainer puts it back)
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    entry()
