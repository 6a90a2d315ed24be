"""A ZeRO sweep of the small GPT on the local cluster (the real job script, launcher and
`hpc-launch sweep`): the report's tokens/s, MFU and perplexity columns are the jobs' own lines."""

from __future__ import annotations

import csv
import os
import re
from pathlib import Path

import pytest

from e2e_support import CLI

pytestmark = [pytest.mark.scheduler, pytest.mark.sweep, pytest.mark.beside]

TRAIN = (
    "--model gpt-tiny --data synthetic-tokens --seq-len 32 --steps 6 --micro-batch 4 --log-every 2 "
    "--synthetic-samples 256 --lr 1e-2"
)


def test_a_zero_sweep_of_gpt_tiny_reports_tokens_per_second_and_perplexity(hpc_launch_bin, tmp_path: Path):
    cli = CLI(hpc_launch_bin, dict(os.environ), tmp_path)
    (tmp_path / "grid.yaml").write_text("zero: [1, 3]\n")
    r = cli(
        "sweep",
        "--cluster",
        "local",
        "-g",  # one rank a point: the report's columns are its log's, whatever the world (a rank is ~6 CPU-s)
        "1",
        "--grid",
        "grid.yaml",
        "--name",
        "lm",
        "--out",
        "rep",
        "--train-args",
        TRAIN,
        timeout=600,
    )
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
    rows = list(csv.DictReader((tmp_path / "rep" / "report.csv").open()))
    assert [row["configuration"].split()[0] for row in rows] == ["zero=1", "zero=3"]
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "| tokens/s | MFU | perplexity |" in md
    for row in rows:
        log = Path(row["log"]).read_text()
        last = re.findall(r"^\[hpc-train\] step=6 .* avg_tokens_per_sec=([\d.]+) mfu=(\S+)$", log, re.M)[-1]
        ppl = re.findall(r"^\[hpc-eval\] loss=\S+ perplexity=([\d.]+)", log, re.M)[-1]
        assert float(row["tokens_per_sec"]) == pytest.approx(float(last[0])) and row["mfu"] == last[1] == "unknown"
        assert float(row["perplexity"]) == pytest.approx(float(ppl)) and row["state"] == "done"
        assert f"| {float(last[0]):,.0f} | unknown | {float(ppl):.2f} |" in md
