"""A user's own script gets the same summary and report figures: DeepSpeed's own timer lines and
the Hugging Face Trainer's log dicts, and the lines the job layer prints for a Lightning fit, read
from text real runs printed (tests/golden/user_logs/:
the scripts that printed them sit beside each log)."""

from pathlib import Path

import pytest

from hpc_launch.display import format_summary, summarise
from hpc_launch.metrics_line import format_lightning_line, parse_line
from hpc_launch.report import tables
from hpc_launch.report.rows import row_for

LOGS = Path(__file__).parent / "golden" / "user_logs"


class _Record:
    job_id, state, exit_code, log_path, comment, cluster, extra = "9", "done", 0, "job.log", "", "local", {}


def test_deepspeed_timer_lines_of_a_real_loop():
    """deepspeed-timers.py: steps_per_print 5, wall_clock_breakdown, run by `deepspeed --num_gpus 1` (0.19.8, CPU)."""
    text = (LOGS / "deepspeed-timers.log").read_text()
    s = summarise(text, state="done", exit_code=0, log_path="job.log")
    assert s.metrics["step"] == 20  # global_step= of the last timer line
    assert s.metrics["avg_samples_per_sec"] == pytest.approx(358.133171891297)
    assert s.metrics["samples_per_sec"] == pytest.approx(10534.500817693286)
    assert (s.metrics["mem_alloc_gb"], s.peak_mem_gb) == (0.34, 0.34)
    assert "20 steps" in format_summary(s, "9") and "358.1 samples/s (mean)" in format_summary(s, "9")
    row = row_for(_Record(), text)
    assert (row.steps, row.samples_per_sec, row.peak_mem_gb_per_gpu) == (20, pytest.approx(358.133), 0.34)
    # the engine's own step line and its wall-clock breakdown carry no figure the summary shows
    assert parse_line("[Rank 0] time (ms) | fwd: 0.05 | bwd: 0.19 | bwd_inner: 0.06 | step: 0.33") is None


def test_hugging_face_trainer_log_dicts_after_a_progress_bar():
    """hf-trainer-callbacks.py: transformers 5.17's ProgressCallback and PrinterCallback print the
    dicts Trainer.log hands them (floats as strings, after tqdm's carriage returns)."""
    text = (LOGS / "hf-trainer-callbacks.log").read_text()
    s = summarise(text, state="done", exit_code=0, log_path="job.log")
    assert s.metrics["loss"] == 1.037 and s.metrics["lr"] == 0.0  # the last step's dict
    assert s.metrics["avg_samples_per_sec"] == 37.94 and s.metrics["steps_per_sec"] == 4.743
    text_summary = format_summary(s, "9")
    assert "final loss 1.0370" in text_summary and "37.9 samples/s (mean)" in text_summary
    assert "4.74 steps/s" in text_summary
    row = row_for(_Record(), text)
    assert (row.samples_per_sec, row.final_loss) == (37.94, 1.037)
    assert "| 37.9 |" in tables.markdown([row], "t")


def test_a_lightning_fit_through_the_job_layer():
    """lightning-fit.py: lightning 2.6.6 prints only its progress bar; the layer's callback printed a
    line every log_every_n_steps (10) on rank 0, and the fit's totals at its end (step 35)."""
    text = (LOGS / "lightning-fit.log").read_text()
    s = summarise(text, state="done", exit_code=0, log_path="job.log")
    assert s.metrics["step"] == 35 and s.metrics["loss"] == 0.7805  # the end line's
    assert s.metrics["avg_samples_per_sec"] == 2627.0473 and s.metrics["steps_per_sec"] == 328.3809
    text_summary = format_summary(s, "9")
    assert "35 steps, final loss 0.7805, 2627.0 samples/s (mean), 328.38 steps/s" in text_summary
    row = row_for(_Record(), text)
    assert (row.steps, row.samples_per_sec, row.final_loss) == (35, 2627.0473, 0.7805)
    assert [p["step"] for p in row.series] == [10, 20, 30, 35]  # the report's loss curve
    assert "| 2627.0 |" in tables.markdown([row], "t")


def test_lightning_line_fields_and_the_scripts_own_names():
    line = format_lightning_line(
        {"step": 50, "loss": 0.25, "samples_per_sec": 800.0, "avg_tokens_per_sec": 4096.0},
        {"loss": 9.0, "val acc": 0.5, "train|device/samples_per_sec": 1.0},
    )
    assert line == (
        "[hpc-launch] lightning step=50 loss=0.2500 samples_per_sec=800.0000 avg_tokens_per_sec=4096.0000"
        " | loss=9 val_acc=0.5 train_device/samples_per_sec=1"
    )
    # our fields only: the script's own `loss` after the bar is not taken for ours
    assert parse_line(line) == {"step": 50, "loss": 0.25, "samples_per_sec": 800.0, "avg_tokens_per_sec": 4096.0}
    assert "4,096 tokens/s (mean)" in format_summary(summarise(line, state="done", exit_code=0, log_path="l"), "9")
    end = format_lightning_line({"step": 60, "steps_per_sec": 2.0}, {}, runtime_s=30.0)
    assert end == "[hpc-launch] lightning end step=60 steps_per_sec=2.0000 runtime_s=30.000"
    assert parse_line(end) == {"step": 60, "steps_per_sec": 2.0}
    assert parse_line("[hpc-launch] lightning resumes from x.ckpt") is None  # the adapter's other words: no numbers
    with pytest.raises(ValueError):
        format_lightning_line({"val_acc": 1.0}, {})


@pytest.mark.parametrize(
    "line, expected",
    [
        # transformers 4.x printed the floats themselves
        ("{'loss': 2.3026, 'learning_rate': 4.5e-05, 'epoch': 0.5}", {"loss": 2.3026, "lr": 4.5e-05, "epoch": 0}),
        (
            "{'train_runtime': 12.5, 'train_samples_per_second': 80.0, 'train_tokens_per_second': 40960.0}",
            {"avg_samples_per_sec": 80.0, "avg_tokens_per_sec": 40960.0},
        ),
        ("{'loss': __import__('os').system('true')}", None),  # literals only: never evaluated
        ("config = {'lossy': 1}", None),
        ("{'loss': 'nan?'}", None),
    ],
)
def test_log_dict_shapes(line, expected):
    assert parse_line(line) == expected
