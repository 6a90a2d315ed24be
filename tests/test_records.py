"""The sqlite job store, including several hpc-launch processes writing at once."""

from __future__ import annotations

import multiprocessing
import os
import sqlite3
import stat

import pytest

from hpc_launch.errors import HpcLaunchError, JobNotFound
from hpc_launch.records import SCHEMA_VERSION, JobRecord, JobStore
from hpc_launch.states import JobState


def rec(job_id: str, cluster: str = "polaris", t: float = 1000.0, **kw) -> JobRecord:
    return JobRecord(
        job_id=job_id,
        cluster=cluster,
        dialect="pbspro",
        host="polaris-login",
        name="train",
        workdir="/scratch/run",
        script_path="/scratch/run/job.sh",
        log_path="/scratch/run/job.log",
        exit_path="/scratch/run/job.exit",
        submit_time=t,
        **kw,
    )


def test_roundtrip_keeps_every_field(tmp_path):
    store = JobStore(tmp_path / "jobs.sqlite")
    original = rec("1.pbs", submit_argv=["qsub", "a b.sh"], profile_path="/p.yaml", extra={"nodes": 2, "q": "debug"})
    store.add(original)
    assert store.get("1.pbs") == original


def test_default_location_honours_state_dir_and_is_private(tmp_path, monkeypatch):
    monkeypatch.setenv("HPC_LAUNCH_STATE_DIR", str(tmp_path / "state"))
    store = JobStore()
    assert store.path == tmp_path / "state" / "jobs.sqlite"
    assert stat.S_IMODE(os.stat(tmp_path / "state").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(store.path).st_mode) == 0o600


def test_get_unknown_names_list_command(tmp_path):
    store = JobStore(tmp_path / "j.sqlite")
    with pytest.raises(JobNotFound) as info:
        store.get("42")
    assert "hpc-launch list" in str(info.value) and "\n" not in str(info.value)


def test_short_pbs_id_finds_the_full_one_and_ambiguity_names_cluster(tmp_path):
    store = JobStore(tmp_path / "j.sqlite")
    store.add(rec("1234.polaris-pbs-01"))
    assert store.get("1234").job_id == "1234.polaris-pbs-01"
    store.add(rec("77", cluster="a"))
    store.add(rec("77", cluster="b"))
    with pytest.raises(HpcLaunchError) as info:
        store.get("77")
    assert "--cluster" in str(info.value)
    assert store.get("77", cluster="b").cluster == "b"
    with pytest.raises(JobNotFound):
        store.get("77", cluster="c")


def test_list_is_newest_first_and_filters(tmp_path):
    store = JobStore(tmp_path / "j.sqlite")
    store.add(rec("1", t=1.0))
    store.add(rec("2", t=3.0, state="done"))
    store.add(rec("3", t=2.0, cluster="aurora"))
    assert [r.job_id for r in store.list()] == ["2", "3", "1"]
    assert [r.job_id for r in store.list(cluster="polaris")] == ["2", "1"]
    assert [r.job_id for r in store.list(active_only=True)] == ["3", "1"]
    assert [r.job_id for r in store.list(limit=1)] == ["2"]


def test_update_changes_fields_and_rejects_unknown(tmp_path):
    store = JobStore(tmp_path / "j.sqlite")
    store.add(rec("9"))
    store.update("polaris", "9", state=JobState.FAILED, exit_code=137, end_time=5.0, extra={"oom": True})
    got = store.get("9")
    assert (got.state, got.exit_code, got.end_time, got.extra) == ("failed", 137, 5.0, {"oom": True})
    with pytest.raises(ValueError):
        store.update("polaris", "9", nodes=3)
    with pytest.raises(JobNotFound):
        store.update("polaris", "nope", state="done")


def test_reused_job_id_replaces_the_old_record(tmp_path):
    store = JobStore(tmp_path / "j.sqlite")
    store.add(rec("5", t=1.0, state="done"))
    store.add(rec("5", t=2.0))
    assert len(store.list()) == 1 and store.get("5").state == "queued"


def test_schema_version_is_recorded_and_newer_schema_refused(tmp_path):
    path = tmp_path / "j.sqlite"
    JobStore(path).close()
    db = sqlite3.connect(path)
    assert db.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    db.execute("UPDATE schema_version SET version = 99")
    db.commit()
    db.close()
    with pytest.raises(HpcLaunchError, match="newer hpc-launch"):
        JobStore(path)


def _worker(path: str, worker: int, n: int) -> None:
    store = JobStore(path)
    for i in range(n):
        store.add(rec(f"{worker}-{i}", cluster=f"c{worker % 2}", t=float(i)))
        store.update(f"c{worker % 2}", f"{worker}-{i}", state="running", extra={"by": worker})
        store.list(limit=5)


def test_concurrent_processes_lose_nothing(tmp_path):
    path = str(tmp_path / "j.sqlite")
    JobStore(path).close()
    ctx = multiprocessing.get_context("spawn")  # like separate hpc-launch invocations
    procs = [ctx.Process(target=_worker, args=(path, w, 50)) for w in range(8)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0] * 8  # a "database is locked" would fail a worker
    rows = JobStore(path).list()
    assert len(rows) == 400
    assert all(r.state == "running" and r.extra["by"] == int(r.job_id.split("-")[0]) for r in rows)
