"""`submit --chain N` names every link it submitted (issue 28: only the first id was printed).
stdout keeps the chain's one id, what scripts capture (`JOB=$(hpc-launch submit ...)`, then
`hpc-launch logs -f $JOB` follows every link); stderr names each later link and its log."""

from __future__ import annotations

import os

import pytest

from hpc_launch import cli
from hpc_launch.records import JobStore


def test_a_chain_names_every_link(tmp_path, monkeypatch, capsys):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    counter = tmp_path / "n"
    counter.write_text("50")
    # a qsub that answers as PBS Professional does (001: `51.pbshead`), one number per job
    (bin_dir / "qsub").write_text(f'#!/bin/sh\nn=$(($(cat {counter}) + 1)); echo $n > {counter}; echo "$n.pbshead"\n')
    (bin_dir / "qsub").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    work = tmp_path / "w"
    argv = ["submit", "-c", "polaris", "--group", "g1", "--login", "local", "--workdir", str(work)]
    with pytest.raises(SystemExit) as done:
        cli.main([*argv, "--name", "links", "--chain", "3", "-q", "preemptable", "-t", "00:30:00", "--no-check"])
    out, err = capsys.readouterr()
    assert done.value.code == 0, err
    assert out == "51.pbshead\n"  # the chain's id, as before
    assert "as 51.pbshead (chain link 1 of 3)" in err
    assert "chain link 2 of 3: 52.pbshead (starts when 51.pbshead has ended); log: " in err
    assert "chain link 3 of 3: 53.pbshead (starts when 52.pbshead has ended); log: " in err
    assert sorted(r.job_id for r in JobStore().list()) == ["51.pbshead", "52.pbshead", "53.pbshead"]
