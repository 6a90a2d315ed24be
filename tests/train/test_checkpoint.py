"""--resume auto never picks a checkpoint that a killed job left half-written."""

import json

import pytest


from hpc_launch.train import checkpoint
from hpc_launch.train.errors import TrainError

pytestmark = pytest.mark.train


def make_tag(root, step, complete=True, files=("mp_rank_00_model_states.pt",)):
    tag = root / f"global_step{step}"
    tag.mkdir(parents=True)
    for f in files:
        (tag / f).write_bytes(b"x")
    if complete:
        (tag / checkpoint.MARKER).write_text(json.dumps({"step": step, "model": "smallcnn"}))
    return tag.name


def test_latest_naming_a_half_written_tag_is_skipped(tmp_path):
    make_tag(tmp_path, 10)
    make_tag(tmp_path, 20)
    # Killed while rank 1 was still writing step 30: DeepSpeed's rank 0 already wrote `latest`.
    make_tag(
        tmp_path, 30, complete=False, files=("mp_rank_00_model_states.pt", "zero_pp_rank_0_mp_rank_00_optim_states.pt")
    )
    (tmp_path / "latest").write_text("global_step30")
    assert checkpoint.find_resume(str(tmp_path)) == (str(tmp_path), "global_step20")


def test_latest_is_preferred_and_garbage_latest_falls_back_to_newest(tmp_path):
    make_tag(tmp_path, 5)
    make_tag(tmp_path, 40)
    (tmp_path / "latest").write_text("global_step40")
    assert checkpoint.find_resume(str(tmp_path))[1] == "global_step40"
    (tmp_path / "latest").write_text("global_st")  # truncated write
    assert checkpoint.find_resume(str(tmp_path))[1] == "global_step40"


def test_marker_with_truncated_json_does_not_count(tmp_path):
    make_tag(tmp_path, 10)
    tag = make_tag(tmp_path, 20, complete=False)
    (tmp_path / tag / checkpoint.MARKER).write_text('{"step": 2')
    assert checkpoint.find_resume(str(tmp_path))[1] == "global_step10"


def test_resume_modes(tmp_path):
    assert checkpoint.resolve_resume("never", str(tmp_path)) is None
    assert checkpoint.resolve_resume("auto", str(tmp_path / "missing")) is None  # fresh start
    assert checkpoint.resolve_resume("auto", None) is None
    make_tag(tmp_path, 10)
    assert checkpoint.resolve_resume(str(tmp_path / "global_step10"), None) == (str(tmp_path), "global_step10")
    assert checkpoint.resolve_resume(str(tmp_path), None) == (str(tmp_path), "global_step10")
    with pytest.raises(TrainError, match="no complete checkpoint"):
        checkpoint.resolve_resume(str(tmp_path / "nothing-here"), None)
