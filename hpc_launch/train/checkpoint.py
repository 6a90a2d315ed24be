"""Checkpoints through DeepSpeed's save_checkpoint/load_checkpoint, plus a completion marker.

DeepSpeed's rank 0 writes the `latest` tag file as soon as *its own* files are written, before
the final barrier, so a job killed at that moment leaves `latest` naming a checkpoint whose
other ranks' files are missing or truncated. After save_checkpoint returns (all ranks passed
its barrier) rank 0 atomically writes `<tag>/hpc_complete.json`; `--resume auto` only picks
tags carrying it, preferring the one `latest` names.
"""

from __future__ import annotations

import json
import os
import re
from typing import Optional, Tuple

from .errors import TrainError

MARKER = "hpc_complete.json"
_STEP_TAG = re.compile(r"^global_step(\d+)$")


def tag_for(step: int) -> str:
    return f"global_step{step}"  # DeepSpeed's own default tag naming


def read_marker(ckpt_dir: str, tag: str) -> Optional[dict]:
    try:
        with open(os.path.join(ckpt_dir, tag, MARKER)) as fh:
            meta = json.load(fh)
        return meta if isinstance(meta, dict) else None
    except (OSError, ValueError):
        return None


def complete_tags(ckpt_dir: str) -> list:
    """Tags with a completion marker, oldest first (by step)."""
    if not os.path.isdir(ckpt_dir):
        return []
    found = []
    for name in os.listdir(ckpt_dir):
        meta = read_marker(ckpt_dir, name)
        if meta is not None and "step" in meta:
            found.append((int(meta["step"]), name))
    return [name for _, name in sorted(found)]


def find_resume(ckpt_dir: str) -> Optional[Tuple[str, str]]:
    """(checkpoint dir, tag) of the newest complete checkpoint in `ckpt_dir`, or None."""
    tags = complete_tags(ckpt_dir)
    if not tags:
        return None
    try:
        with open(os.path.join(ckpt_dir, "latest")) as fh:
            latest = fh.read().strip()
    except OSError:
        latest = None
    newest = tags[-1]
    if latest is not None and latest in tags:
        marked, newest_marker = read_marker(ckpt_dir, latest), read_marker(ckpt_dir, newest)
        if marked and newest_marker and marked["step"] >= newest_marker["step"]:
            return ckpt_dir, latest
    return ckpt_dir, newest


def resolve_resume(resume: str, ckpt_dir: Optional[str]) -> Optional[Tuple[str, str]]:
    """--resume auto|never|PATH -> (dir, tag) to load, or None to start fresh."""
    if resume == "never":
        return None
    if resume == "auto":
        return find_resume(ckpt_dir) if ckpt_dir else None
    path = os.path.abspath(resume)
    if read_marker(os.path.dirname(path), os.path.basename(path)) is not None:  # a tag directory
        return os.path.dirname(path), os.path.basename(path)
    found = find_resume(path)
    if found is None:
        raise TrainError(
            f"no complete checkpoint under {resume}",
            hint="pass a checkpoint directory or one of its global_stepN folders, or --resume never",
        )
    return found


def save(engine, ckpt_dir: str, step: int, meta: dict) -> str:
    """All ranks call this. Returns the tag once every rank's files are on disk."""
    import deepspeed.comm as dist

    tag = tag_for(step)
    state = dict(meta, step=step)
    engine.save_checkpoint(ckpt_dir, tag=tag, client_state={"hpc_train": state})
    dist.barrier()
    if dist.get_rank() == 0:
        tmp = os.path.join(ckpt_dir, tag, MARKER + ".tmp")
        with open(tmp, "w") as fh:
            json.dump(state, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, os.path.join(ckpt_dir, tag, MARKER))
    dist.barrier()
    return tag


def load(engine, ckpt_dir: str, tag: str) -> dict:
    """Load model, optimizer and LR-scheduler state; returns our saved metadata (step etc.)."""
    path, client_state = engine.load_checkpoint(ckpt_dir, tag=tag)
    if path is None:
        raise TrainError(f"DeepSpeed could not load checkpoint {os.path.join(ckpt_dir, tag)}")
    meta = (client_state or {}).get("hpc_train") or read_marker(ckpt_dir, tag)
    if not meta:
        raise TrainError(f"checkpoint {os.path.join(ckpt_dir, tag)} has no hpc-train metadata")
    return meta


def load_weights_single_process(ckpt_dir: str, tag: str) -> dict:
    """Full fp32 state_dict for one process, without a process group (for evaluation)."""
    import torch

    meta = read_marker(ckpt_dir, tag) or {}
    if meta.get("zero_stage", 0) >= 1:
        # DeepSpeed's consolidator: merges the ZeRO-partitioned fp32 master weights (and buffers).
        from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

        state = get_fp32_state_dict_from_zero_checkpoint(ckpt_dir, tag=tag)
    else:
        blob = torch.load(
            os.path.join(ckpt_dir, tag, "mp_rank_00_model_states.pt"), map_location="cpu", weights_only=False
        )
        state = blob["module"]
    return {k: (v.float() if torch.is_floating_point(v) else v) for k, v in state.items()}
