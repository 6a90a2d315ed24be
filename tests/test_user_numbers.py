"""A user's own script gets the same summary and report figures: DeepSpeed's own timer lines and
the Hugging Face Trainer's log dicts, read from text real runs printed (tests/golden/user_logs/:
the scripts that printed them sit beside each log)."""

from pathlib import Path

import pytest

from hpc_launch.display import format_summary, summarise
from hpc_launch.metrics_line import parse_line
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
