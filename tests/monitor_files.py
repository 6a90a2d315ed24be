"""Read what the monitors wrote back with their own readers: TensorBoard's event accumulator, and
W&B's run records (the `.wandb` file of an offline run, parsed with wandb's own protobuf schema)."""

from __future__ import annotations

import struct
from pathlib import Path

WANDB_HEADER = 7  # ":W&B", a 2-byte magic and a version byte
WANDB_BLOCK = 32768  # records are framed like LevelDB's log: 7-byte header (crc, length, type) in 32 KiB blocks


def tensorboard_scalars(log_dir: Path, tag: str) -> list:
    """[(step, value)] of `tag` as TensorBoard shows them (its purges of orphaned steps applied)."""
    from tensorboard.backend.event_processing import event_accumulator

    acc = event_accumulator.EventAccumulator(str(log_dir), size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def wandb_records(run_file: Path) -> list:
    """The records of a `run-<id>.wandb` file, in order (wandb_internal_pb2.Record)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = run_file.read_bytes()
    assert data[:4] == b":W&B", f"{run_file} is not a W&B run file"
    records, pending, pos = [], b"", WANDB_HEADER
    while pos + 7 <= len(data):
        room = WANDB_BLOCK - pos % WANDB_BLOCK
        if room < 7:  # a block's tail too short for a header is padding
            pos += room
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0 and length == 0:
            break
        pending += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a whole record, or the last piece of one
            record = pb.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def wandb_run(run_dir: Path) -> dict:
    """An offline run directory's run id (from its run record) and the history steps it logged."""
    (run_file,) = run_dir.glob("run-*.wandb")
    ids, steps = set(), []
    for record in wandb_records(run_file):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            ids.add(record.run.run_id)
        elif kind == "history":
            steps.append(record.history.step.num)
    assert len(ids) == 1, f"{run_file}: run records name {ids}"
    return {"id": ids.pop(), "steps": steps}
