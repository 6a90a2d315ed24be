"""A language model's figures in the one log line, the summary and the report: tokens/s, MFU
(unknown where the device has no peak), held-out perplexity; old lines still parse the same."""

import math

import pytest

from hpc_launch.display import format_summary, summarise
from hpc_launch.metrics_line import format_step_line, parse_line
from hpc_launch.report import tables
from hpc_launch.report.rows import row_for
from hpc_launch.train.peak_flops import peak_for, peak_tflops

LM_LOG = "".join(
    line + "\n"
    for line in (
        "training gpt-125m on synthetic-tokens: world=8 (torch) zero=1 offload=none precision=bf16 "
        "micro=16 accum=1 global=128 steps=100 steps/epoch=32 threads/rank=1",
        "[hpc-train] step=50 epoch=1 loss=4.1000 lr=0.0006 samples_per_sec=300.0 "
        "avg_samples_per_sec=290.0 mem_alloc_gb=20.0 mem_peak_gb=31.5 world_size=8 "
        "tokens_per_sec=307200.0 avg_tokens_per_sec=296960.0 mfu=0.3842",
        "training finished: steps=100 wall_s=44.0 ended_at=1795765518.439",
        "[hpc-eval] loss=3.9000 perplexity=49.4024 tokens=8192 split=val step=100 time_s=2.5",
    )
)


def test_new_fields_round_trip_and_mfu_unknown_reads_as_nan():
    line = format_step_line(step=3, loss=2.5, tokens_per_sec=1000.0, avg_tokens_per_sec=900.0, mfu=float("nan"))
    assert line.endswith("tokens_per_sec=1000.0000 avg_tokens_per_sec=900.0000 mfu=unknown")
    parsed = parse_line(line)
    assert parsed["step"] == 3 and parsed["avg_tokens_per_sec"] == 900.0 and math.isnan(parsed["mfu"])
    assert parse_line(format_step_line(step=3, mfu=0.41))["mfu"] == 0.41


def test_a_line_of_before_still_parses_as_it_did():
    old = (
        "[hpc-train] step=12 epoch=0 loss=2.3012 lr=0.001 samples_per_sec=123.4 avg_samples_per_sec=120.0 world_size=2"
    )
    assert parse_line(old) == {
        "step": 12,
        "epoch": 0,
        "loss": 2.3012,
        "lr": 0.001,
        "samples_per_sec": 123.4,
        "avg_samples_per_sec": 120.0,
        "world_size": 2,
    }


def test_summary_says_tokens_per_second_mfu_and_perplexity():
    s = summarise(LM_LOG, state="done", exit_code=0, log_path="job.log")
    assert s.eval_perplexity == pytest.approx(49.4024) and s.eval_s == 2.5
    text = format_summary(s, "42")
    assert "296,960 tokens/s (mean)" in text and "MFU 38.4%" in text and "held-out perplexity 49.40" in text
    unknown = format_summary(
        summarise(LM_LOG.replace("mfu=0.3842", "mfu=unknown"), state="done", exit_code=0, log_path="job.log"), "42"
    )
    assert "MFU unknown" in unknown


class _Record:
    job_id, state, exit_code, log_path, comment, cluster, extra = "7", "done", 0, "job.log", "", "local", {}


def test_report_has_token_columns_only_where_a_job_reports_tokens(tmp_path):
    lm = row_for(_Record(), LM_LOG)
    assert (lm.tokens_per_sec, lm.mfu, lm.perplexity) == (296960.0, 0.3842, pytest.approx(49.4024))
    md = tables.markdown([lm], "t")
    assert "| tokens/s | MFU | perplexity |" in md and "| 296,960 | 38.4% | 49.40 |" in md
    unknown = row_for(_Record(), LM_LOG.replace("mfu=0.3842", "mfu=unknown"))
    assert "| 296,960 | unknown | 49.40 |" in tables.markdown([unknown], "t")
    assert ",unknown," in tables.csv_text([unknown])
    vision = row_for(_Record(), LM_LOG.split("\n", 1)[0] + "\n[hpc-train] step=5 loss=1.0 avg_samples_per_sec=9.0\n")
    assert "tokens/s" not in tables.markdown([vision], "t")


@pytest.mark.parametrize(
    "name, precision, tflops",
    [
        ("NVIDIA H100 80GB HBM3", "bf16", 989.0),
        ("NVIDIA H100 PCIe", "bf16", 756.0),
        ("NVIDIA H200", "fp16", 989.0),
        ("NVIDIA GH200 480GB", "bf16", 989.0),
        ("NVIDIA A100-SXM4-40GB", "bf16", 312.0),
        ("NVIDIA A100-SXM4-40GB", "fp32", 19.5),
        ("AMD Instinct MI250X", "bf16", 191.5),
        ("Intel(R) Data Center GPU Max 1550", "bf16", 416.0),
        ("Intel(R) Data Center GPU Max 1550", "fp32", None),
        ("cpu", "bf16", None),
        ("NVIDIA GeForce RTX 3090", "bf16", None),
    ],
)
def test_peak_table_by_device_name(name, precision, tflops):
    assert peak_tflops(name, precision) == tflops


def test_every_peak_names_its_source_and_halved_figures_say_inferred():
    for words in (("h100",), ("mi250x",), ("max 1550",)):
        peak = peak_for(" ".join(words))
        assert peak is not None and peak.source
    assert peak_for("mi250x").inferred and not peak_for("h100").inferred


def test_scaling_table_has_the_median_tokens_per_second_and_mfu_of_a_language_model():
    from hpc_launch.report.scaling import scaling

    def record(job, nodes):
        r = _Record()
        r.job_id, r.extra = job, {"nodes": nodes}
        return r

    faster = LM_LOG.replace("avg_samples_per_sec=290.0", "avg_samples_per_sec=560.0").replace(
        "avg_tokens_per_sec=296960.0", "avg_tokens_per_sec=573440.0"
    )
    rows = [row_for(record("1", 1), LM_LOG), row_for(record("2", 2), faster.replace("mfu=0.3842", "mfu=0.3710"))]
    groups, why = scaling(rows)
    assert why == "" and [p.tokens_per_sec for p in groups[0].points] == [296960.0, 573440.0]
    md = tables.scaling_markdown(groups, None)
    assert "| tokens/s (median) | MFU |" in md and "| 573,440 | 37.1% |" in md
    assert "573440.0,0.371" in tables.scaling_csv(groups)
    unknown = [row_for(record(str(n), n), LM_LOG.replace("mfu=0.3842", "mfu=unknown")) for n in (1, 2)]
    assert "| 296,960 | unknown |" in tables.scaling_markdown(scaling(unknown)[0], None)
