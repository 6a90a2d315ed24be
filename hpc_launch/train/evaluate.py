"""Top-1/top-5 accuracy: at the end of training (all ranks) and standalone from a checkpoint.

Standalone (the tutorial's eval step), one process, no process group:
    python -m hpc_launch.train.evaluate --checkpoint-dir DIR --data PATH|digits|synthetic [--model NAME]
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable, Optional

from .errors import TrainError


def topk_correct(logits, labels, valid, ks=(1, 5)):
    """Number of valid samples whose label is in the top-k, for each k (k capped at #classes)."""
    import torch

    k_max = min(max(ks), logits.shape[1])
    top = logits.topk(k_max, dim=1).indices
    hit = top.eq(labels.view(-1, 1)) & valid.view(-1, 1)
    return torch.stack([hit[:, : min(k, k_max)].any(dim=1).sum() for k in ks]).to(torch.float64)


def accuracy(
    forward: Callable,
    dataset,
    rank: int = 0,
    world_size: int = 1,
    batch_size: int = 256,
    limit: Optional[int] = None,
    all_reduce: Optional[Callable] = None,
) -> dict:
    """{"top1", "top5", "samples"} over `dataset` split across ranks (padding never counted)."""
    import torch
    from torch.utils.data import DataLoader

    from .data import EvalSubset, eval_shards

    length = min(len(dataset), limit) if limit else len(dataset)
    subset = EvalSubset(dataset, eval_shards(length, rank, world_size))
    totals = torch.zeros(3, dtype=torch.float64)
    with torch.no_grad():
        for images, labels, valid in DataLoader(subset, batch_size=batch_size):  # type: ignore[arg-type]  # map-style
            logits = forward(images).float()
            totals[:2] += topk_correct(logits, labels.to(logits.device), valid.to(logits.device)).cpu()
            totals[2] += valid.sum()
    if all_reduce is not None:
        all_reduce(totals)
    n = max(totals[2].item(), 1.0)
    return {"top1": totals[0].item() / n, "top5": totals[1].item() / n, "samples": int(totals[2].item())}


def eval_line(result: dict, **extra) -> str:
    parts = [f"top1={result['top1']:.4f}", f"top5={result['top5']:.4f}", f"samples={result['samples']}"]
    parts += [f"{k}={v}" for k, v in extra.items()]
    return "[hpc-eval] " + " ".join(parts)


def _parse(argv):
    p = argparse.ArgumentParser(
        prog="python -m hpc_launch.train.evaluate",
        description="Load a training checkpoint into one process; report top-1/top-5.",
    )
    p.add_argument("--checkpoint-dir", required=True, help="checkpoint directory, or one of its global_stepN folders")
    p.add_argument(
        "--data",
        default=None,
        help="synthetic | digits | ImageFolder root (uses ROOT/val); default: the data the checkpoint was trained on",
    )
    p.add_argument("--model", default=None, help="default: the model recorded in the checkpoint")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--limit", type=int, default=None, help="evaluate only the first N validation images")
    p.add_argument("--image-size", type=int, default=None)
    return p.parse_args(argv)


def run(argv=None) -> int:
    args = _parse(argv)
    from . import checkpoint

    found = checkpoint.resolve_resume(args.checkpoint_dir, None)
    if found is None:
        raise TrainError(f"no complete checkpoint under {args.checkpoint_dir}")
    ckpt_dir, tag = found
    meta = checkpoint.read_marker(ckpt_dir, tag) or {}
    model_name = args.model or meta.get("model")
    data_spec = args.data or meta.get("data")
    if not model_name or not data_spec:
        raise TrainError("the checkpoint does not record its model/data", hint="pass --model and --data")
    from .factory import is_factory
    from .lm import is_lm

    if is_factory(model_name) or is_lm(model_name, data_spec):
        raise TrainError(
            f"the standalone eval measures classifiers; {model_name} is a language model or your own",
            hint="a language model's held-out perplexity is printed at the end of its training ([hpc-eval])",
        )

    from .data import build_data
    from .models import build_model

    data = build_data(
        data_spec,
        args.image_size or meta.get("image_size"),
        num_classes=meta.get("num_classes", 10),
        seed=meta.get("seed", 0),
    )
    if data.val is None:
        raise TrainError(f"{data_spec} has no validation split", hint="expected ROOT/val/<class>/...")
    model = build_model(model_name, meta.get("num_classes", data.num_classes))
    try:
        model.load_state_dict(checkpoint.load_weights_single_process(ckpt_dir, tag))
    except RuntimeError as err:
        raise TrainError(f"checkpoint {tag} does not fit model {model_name}: {str(err).splitlines()[0]}") from None
    model.eval()
    result = accuracy(model, data.val, batch_size=args.batch_size, limit=args.limit)
    print(eval_line(result, checkpoint=f"{ckpt_dir}/{tag}", model=model_name), flush=True)
    return 0


def main(argv=None) -> int:
    try:
        return run(argv)
    except TrainError as err:
        print(f"error: {err.one_line()}", file=sys.stderr, flush=True)
        return err.exit_code


if __name__ == "__main__":
    sys.exit(main())
