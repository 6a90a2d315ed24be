"""`status` and `list` into a pipe or a file: one line per job, however long the scheduler's
comment (issue 28: a long PBS comment wrapped onto a second line, so a script reading one line
per job got half a row)."""

from __future__ import annotations

import pytest

from hpc_launch import cli
from hpc_launch.records import JobRecord, JobStore

# a real server's comment (018-qstat-f-never-runs-ncpus), with the id of a long PBS server name
COMMENT = "Can Never Run: Insufficient amount of resource: ncpus (R: 64 A: 32 T: 32) " + "x" * 120


def _add(store, job_id, state="done", comment=COMMENT):
    store.add(
        JobRecord(
            job_id=job_id,
            cluster="polaris",
            dialect="pbspro",
            host="localhost",
            name="train",
            workdir="/lus/eagle/projects/datascience/someone/work",
            script_path="/lus/eagle/projects/datascience/someone/work/.hpc-launch/train-20261127-074400-123.sh",
            log_path=f"/lus/eagle/projects/datascience/someone/work/train.o{job_id.split('.')[0]}",
            exit_path="/x.exitcode",
            submit_time=1795000000.0,
            state=state,
            exit_code=0,
            comment=comment,
        )
    )


@pytest.mark.parametrize("command", [["status", "349710", "349711"], ["list"]])
def test_one_line_per_job_when_not_a_terminal(capsys, command):
    store = JobStore()
    _add(store, "349710.polaris-pbs-01.hsn.cm.polaris.alcf.anl.gov")
    _add(store, "349711.polaris-pbs-01.hsn.cm.polaris.alcf.anl.gov", comment="line one\nline two")
    with pytest.raises(SystemExit) as done:
        cli.main(command)
    out, err = capsys.readouterr()
    assert done.value.code == 0, err
    lines = out.splitlines()
    assert len(lines) == 3, out  # the header and one line per job
    assert lines[0].split()[:4] == ["job", "id", "cluster", "name"] and lines[0].endswith("scheduler says")
    row = next(line for line in lines if line.startswith("349710."))
    assert row.endswith(COMMENT) and "/lus/eagle/projects/datascience/someone/work/train.o349710" in row
    assert next(line for line in lines if line.startswith("349711.")).endswith("line one line two")
    assert lines[1].index("done") == lines[0].index("state")  # columns line up with the header
