"""docs/guide.md is executed: every ```bash block, in order, in one shell, in a scratch home
(real jobs on `local`, `--dry-run` where a real site is needed). A guide whose examples do not
run is a bug."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

GUIDE = Path(__file__).parent.parent / "docs" / "guide.md"
BLOCK = re.compile(r"^```bash\n(.*?)^```$", re.S | re.M)


def _blocks():
    return BLOCK.findall(GUIDE.read_text())


def _shm():
    return {p.name for p in Path("/dev/shm").glob("deepspeed_allreduce_buffer_*")}


def test_the_guide_has_runnable_blocks_for_every_section():
    text = GUIDE.read_text()
    blocks = _blocks()
    assert len(blocks) >= 8
    for heading in (
        "A first run on this machine",
        "from your laptop",
        "Your own training script",
        "Hugging Face Trainer",
        "Your site's profile",
        "Your own template",
        "doctor",
    ):
        section = text.split(heading, 1)[1].split("\n## ", 1)[0]
        assert "```bash" in section, f"section {heading!r} has no block the test runs"


@pytest.mark.train
def test_every_command_in_the_guide_runs(tmp_path, hpc_launch_bin):
    home = tmp_path / "home"
    home.mkdir()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("HPC_LAUNCH_", "XDG_", "PBS_", "SLURM_", "SGE_", "COBALT_"))
        and k not in ("PE_HOSTFILE", "JOB_ID")
    }
    env.update(HOME=str(home), PATH=f"{Path(hpc_launch_bin).parent}:{env['PATH']}")
    script = "set -euo pipefail\n" + "\n".join(f"echo '=== block {i}'\n{b}" for i, b in enumerate(_blocks()))
    before = _shm()
    try:
        r = subprocess.run(["bash", "-c", script], cwd=home, env=env, capture_output=True, text=True, timeout=900)
    finally:
        for name in _shm() - before:  # DeepSpeed's CPU all-reduce segments of the guide's own script
            (Path("/dev/shm") / name).unlink(missing_ok=True)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    # what the guide says the reader will see
    assert "hpc-launch " in r.stdout and "── job " in r.stderr and "final loss" in r.stderr  # 1, 2
    assert re.search(r"^#PBS -P gxx00000$", r.stdout, re.M) and "mpirun -np" in r.stdout  # 3
    assert re.search(r"^rank [01] of 2, local rank [01], master ", r.stdout, re.M)  # 4
    assert "# capsule: " in r.stdout and "--deepspeed ds_zero2_auto.json" in r.stdout  # 5
    assert "#SBATCH --account=proj42" in r.stdout and "recommended: --zero" in r.stdout  # 6
    assert "[our-site] rendezvous at" in r.stdout  # 7
    assert re.search(r"^cause: .*batch", out, re.M | re.I) and re.search(r"^fix: ", out, re.M)  # 8
