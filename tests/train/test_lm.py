"""Language models through the real deepspeed launcher (2 CPU ranks): a GPT on synthetic tokens
and a T5 on a JSONL file read as bytes. Loss falls, held-out perplexity printed, and the summary
says tokens/s and MFU unknown (a CPU has no peak in hpc_launch/train/peak_flops.py)."""

import json
import math

import pytest

from ds_launch import launch

from hpc_launch.display import format_summary, summarise

pytestmark = pytest.mark.train

SHORT = ["--steps", "40", "--log-every", "5", "--micro-batch", "8", "--seq-len", "32", "--lr", "1e-2"]


def _summary(run) -> str:
    return format_summary(summarise(run.out, state="done", exit_code=0, log_path="log"), "1")


def test_gpt_tiny_on_synthetic_tokens_learns_and_reports_tokens_per_second(tmp_path):
    run = launch(
        ["--model", "gpt-tiny", "--data", "synthetic-tokens", "--synthetic-samples", "1024", "--zero", "3", *SHORT],
        cwd=tmp_path,
    )
    assert run.rc == 0, run.out[-3000:]
    assert [s["step"] for s in run.steps] == list(range(5, 41, 5))
    assert run.losses[-1] < 0.8 * run.losses[0] and run.losses[0] > 5.5, run.losses  # ln(512) = 6.24 at the start
    for s in run.steps:  # tokens/s is samples/s x --seq-len; the CPU has no peak: mfu=unknown (nan)
        assert s["avg_tokens_per_sec"] == pytest.approx(s["avg_samples_per_sec"] * 32, rel=1e-3)
        assert math.isnan(s["mfu"])
    assert "mfu=unknown" in run.out
    ppl = float(run.evals[-1]["perplexity"])
    assert ppl == pytest.approx(math.exp(float(run.evals[-1]["loss"])), rel=1e-3)
    assert ppl < 512 * 0.5 and int(run.evals[-1]["tokens"]) == 64 * 31  # every held-out token counted once
    text = _summary(run)
    assert "tokens/s (mean)" in text and "MFU unknown" in text and "held-out perplexity" in text, text


def test_t5_tiny_on_a_jsonl_file_as_bytes_learns_to_denoise(tmp_path):
    docs = [{"text": f"record {i}: the quick brown fox jumps over the lazy dog {i % 7}."} for i in range(300)]
    data = tmp_path / "corpus.jsonl"
    data.write_text("".join(json.dumps(d) + "\n" for d in docs))
    run = launch(["--model", "t5-tiny", "--data", str(data), "--zero", "2", *SHORT], cwd=tmp_path)
    assert run.rc == 0, run.out[-3000:]
    assert "vocab=258 (bytes)" in run.out and "seq2seq" in run.out
    assert run.losses[-1] < 0.7 * run.losses[0], run.losses
    assert float(run.evals[-1]["perplexity"]) < math.exp(run.losses[0])
    assert "tokens/s (mean)" in _summary(run)
