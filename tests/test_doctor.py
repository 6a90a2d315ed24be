"""`hpc-launch doctor`: each cause from the failing program's own output (tests/golden/doctor/,
README there says how each line was produced), the unknown case, precedence, and the command on a
log file and on a recorded job."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from hpc_launch.doctor import CAUSES, diagnose, report_lines, summary_lines
from pbs_fixtures import SCHED, load

DOCTOR = Path(__file__).parent / "golden" / "doctor"


def _log(name: str) -> str:
    return (DOCTOR / name).read_bytes().decode("utf-8")


def _never_runs_comment() -> str:
    return re.search(r"(?m)^    comment = (.*)$", load("014").out).group(1)


# (fixture or text, cause key, facts, a piece of the evidence line, the line number or None)
CASES = [
    (
        "watchdog-hang-sigstop.log",
        "hang",
        {"exit_code": 124, "state": "failed"},
        "hang: rank 1 on vm stopped: no heartbeat for",
        56,
    ),
    (
        "preflight-rank-twice.log",
        "preflight",
        {"exit_code": 78, "state": "failed"},
        "preflight failed: vm: a rank started twice: rank 0 on vm and again on vm",
        4,
    ),
    (
        "preflight-rank-twice-other.log",
        "preflight",
        {"exit_code": 78, "state": "failed"},
        "rank 0 was started twice (again on vm)",
        3,
    ),
    (
        "slurm-task-launch-failed.log",
        "node_failure",
        {"exit_code": 1, "state": "failed"},
        "srun: error: Task launch for StepId=15.0 failed on node pod3: Communication connection failure",
        None,
    ),
    (
        "hpc-launch-nodes.log",
        "hpc_launch_nodes",
        {"exit_code": 3},
        "node list has 1 distinct host(s) but the job asked for 2",
        2,
    ),
    ("hpc-launch-net-if.log", "hpc_launch_net_if", {"exit_code": 3}, "network interface ib0 (profile key net_if)", 4),
    (
        "hpc-launch-not-installed.log",
        "hpc_launch_not_installed",
        {"exit_code": 3},
        "is not installed in the job's Python environment",
        5,
    ),
    ("hpc-launch-pass-env-gone.log", "hpc_launch_error", {"exit_code": 1}, "--pass-env FOO cannot be set", 1),
    (
        "deepspeed-batch-assertion.log",
        "batch_size",
        {"exit_code": 1},
        "AssertionError: Check batch related parameters",
        16,
    ),
    ("train-batch-mismatch.log", "batch_size", {"exit_code": 2}, "global batch 100 != micro-batch 8", None),
    ("train-batch-not-multiple.log", "batch_size", {"exit_code": 2}, "is not a multiple of micro-batch 8", None),
    ("deepspeed-hostfile-bad-entry.log", "hostfile", {}, "ValueError: Hostfile contains a bad entry: pod2:2", 14),
    ("deepspeed-hostfile-duplicate.log", "hostfile", {}, "multiple entries for pod1", 14),
    ("deepspeed-hostfile-empty.log", "hostfile", {}, "Hostfile is empty or not formatted correctly", 14),
    ("ssh-host-key-unknown.log", "ssh_host_key", {}, "Host key verification failed.", 2),
    ("ssh-host-key-changed.log", "ssh_host_key", {}, "REMOTE HOST IDENTIFICATION HAS CHANGED", 2),
    ("pdsh-host-key.log", "ssh_host_key", {}, "10.200.0.12: Host key verification failed.", 2),
    ("ssh-permission-denied.log", "ssh_auth", {}, "Permission denied (publickey)", 1),
    ("pdsh-permission-denied.log", "ssh_auth", {}, "Permission denied (publickey)", 1),
    ("deepspeed-ssh-check.log", "ssh_auth", {}, "host=10.200.0.12 was not reachable via ssh", None),
    ("module-command-not-found.log", "module_command", {"exit_code": 127}, "module: command not found", 1),
    ("lmod-unknown-module.log", "module_unknown", {}, "The following module(s) are unknown", 1),
    ("envmodules-unknown-module.log", "module_unknown", {}, "Unable to locate a modulefile for 'cuda/12.6'", 1),
    ("python-no-torch.log", "no_torch", {"exit_code": 1}, "No module named 'torch'", 3),
    ("python-no-deepspeed.log", "no_torch", {"exit_code": 1}, "No module named 'deepspeed'", 3),
    ("deepspeed-cuda-mismatch.log", "cuda_mismatch", {}, "Installed CUDA version 11.8 does not match", None),
    ("deepspeed-jit-no-compiler.log", "jit_no_compiler", {}, "c++: not found", None),
    ("torch-buildext-no-compiler.log", "jit_no_compiler", {}, "No such file or directory: 'g++'", None),
    ("setuptools-no-compiler.log", "jit_no_compiler", {}, "error: command 'x86_64-linux-gnu-gcc' failed", 1),
    ("torch-jit-compile-error.log", "jit_build", {}, "Error building extension 'bad_op'", None),
    ("charliecloud-image-missing.log", "container_image", {}, "can't stat: /tmp/chtest/nope-image", 1),
    ("hpc-launch-container-image.log", "container_image", {}, "container image /tmp/e2e/nope.sif not found", 1),
    ("charliecloud-bind-missing.log", "container_bind", {}, "source not found: /nonexistent/data", 1),
    ("container-mpi-abi.log", "container_mpi_abi", {}, "libmpi.so.40: cannot open shared object file", 1),
    (
        "cuda-out-of-memory.log",
        "cuda_oom",
        {},
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        4,
    ),
    ("slurm-oom-kill-22.05.log", "host_oom", {}, "Detected 1 oom-kill event(s)", 2),
    ("slurm-oom-kill-23.02.log", "host_oom", {}, "Detected 2 oom_kill events", 1),
    ("kernel-oom-kill.log", "host_oom", {}, "Out of memory: Killed process 1613604 (python)", 1),
    ("torch-cpu-allocator.log", "host_oom", {}, "DefaultCPUAllocator: can't allocate memory", 3),
    ("bash-killed.log", "host_oom", {"exit_code": 137, "state": "failed"}, "Killed", 1),
    (
        "deepspeed-rank-sigkill.log",
        "host_oom",
        {"exit_code": 247, "state": "failed"},
        "exits with return code = -9",
        None,
    ),
    ("pbs-routing-rejected.log", "queue_limit", {}, "Job rejected by all possible destinations", 1),
    ("slurm-qos-maxwall.log", "queue_limit", {}, "sbatch: error: QOSMaxWallDurationPerJobLimit", 1),
    ("slurm-sbatch-node-config.log", "queue_limit", {}, "Requested node configuration is not available", 2),
    ("slurm-sbatch-time-limit.log", "queue_limit", {}, "Requested time limit is invalid", 1),
    ("gloo-wrong-interface.log", "wrong_interface", {}, "Gloo connectFullMesh failed", None),
    (
        "torch-store-timeout.log",
        "rendezvous",
        {},
        "DistNetworkError: The client socket has timed out after 5000ms",
        None,
    ),
    ("torch-store-no-route.log", "rendezvous", {}, "(10.200.0.99, 29517)", None),
    ("torch-connect-timed-out.log", "rendezvous", {}, "RuntimeError: connect() timed out.", 3),
    ("gloo-collective-timeout.log", "collective_timeout", {}, "Timed out waiting 3000ms for recv operation", None),
    ("nccl-watchdog-timeout.log", "collective_timeout", {}, "Watchdog caught collective operation timeout", 1),
    ("slurm-time-limit.log", "walltime", {"state": "timeout"}, "CANCELLED AT 2026-11-23T00:46:20 DUE TO TIME LIMIT", 2),
    # a chain link that stopped itself (exit 75) is not "killed by the scheduler", though Slurm says CANCELLED
    # for its step
    (
        "hpc-train-stopped-for-time.log",
        "stopped_for_time",
        {"exit_code": 75, "state": "timeout"},
        "stopped for time at step 80 of 900",
        28,
    ),
    (
        # a real H200 run (bench/bench_gpu.py): the rank's RuntimeError, not the refused connection of
        # its DataLoader thread dying after it, which doctor took for a rendezvous failure before
        "deepspeed-bf16-batchnorm-h200.log",
        "python_exception",
        {"exit_code": 1, "state": "failed"},
        "[rank0]: RuntimeError: Expected running_mean to have type BFloat16 but got Float",
        50,
    ),
    (
        "unknown-file-not-found.log",
        "python_exception",
        {"exit_code": 1, "state": "failed"},
        "FileNotFoundError: [Errno 2] No such file or directory: '/data/imagenet/train/n01440764/missing.JPEG'",
        3,
    ),
]


@pytest.mark.parametrize("fixture,key,facts,evidence,line_no", CASES, ids=[c[0] for c in CASES])
def test_a_real_message_names_its_cause(fixture, key, facts, evidence, line_no):
    d = diagnose(_log(fixture), **facts)
    assert d.found and d.top.cause.key == key, report_lines(d)
    assert evidence in d.top.evidence
    if line_no is not None:
        assert d.top.line_no == line_no
        assert _log(fixture).replace("\r\n", "\n").split("\n")[line_no - 1].strip().startswith(d.top.evidence[:40])
    lines = report_lines(d)
    assert lines[0].startswith("cause: ") and lines[1].startswith("fix: ") and lines[2].startswith("evidence: ")
    assert "{" not in lines[0] + lines[1] and "[[" not in lines[0] + lines[1], "a template field was left unfilled"


def test_every_cause_has_a_real_case_and_every_fixture_is_used():
    # also from the PBS/SGE recordings below; container_gpu: Apptainer's words, cited (no GPU host here)
    covered = {c[1] for c in CASES} | {"queue_limit", "walltime", "container_gpu"}
    assert {c.key for c in CAUSES} <= covered
    used = {c[0] for c in CASES} | {"deepspeed-cuda-minor-mismatch-accepted.log", "unknown-shell-missing-file.log"}
    assert {p.name for p in DOCTOR.glob("*.log")} == used


def test_the_docs_list_every_cause():
    docs = (Path(__file__).parent.parent / "docs" / "commands.md").read_text()
    section = docs.split("\n## doctor\n", 1)[1].split("\n## ", 1)[0]
    for cause in CAUSES:
        assert f"| {cause.title} |" in section, f"docs/commands.md#doctor does not list {cause.title!r}"


# ---- the schedulers' own words: recordings under tests/golden/pbspro-observed and sched ------------


def test_pbs_walltime_kill_from_the_recorded_job_stderr():
    from hpc_launch.dialects.pbspro import kill_reason

    text = load("050").out
    verdict = kill_reason(text)  # what jobs.py stores as the record's comment and state
    d = diagnose(text, exit_code=None, comment=verdict.comment, state=verdict.state)
    assert d.top.cause.key == "walltime"
    assert d.top.text == "the job ran out of walltime (12 s used, limit 5 s): the scheduler killed it at its limit"
    assert d.top.line_no == 1 and "--walltime" in d.top.fix


def test_pbs_memory_limit_from_the_recorded_job_stderr():
    d = diagnose(load("052").out, exit_code=1, state="failed")
    assert d.top.cause.key == "host_oom" and d.top.evidence == "MemoryError"


def test_pbs_queue_limit_from_the_recorded_qsub_refusal():
    d = diagnose(load("012").err)
    assert (
        d.top.cause.key == "queue_limit" and "qsub: Job violates queue and/or server resource limits" in d.top.evidence
    )
    assert "--walltime" in d.top.fix and "--queue" in d.top.fix


def test_a_job_that_can_never_run_is_diagnosed_from_the_scheduler_comment_alone():
    d = diagnose("", state="failed", comment=_never_runs_comment())
    assert d.top.cause.key == "queue_limit" and d.top.line_no is None
    assert d.top.text.endswith("(Not enough total nodes available)")
    assert report_lines(d)[2] == "evidence: scheduler: Can Never Run: Not enough total nodes available"


def test_grid_engine_h_rt_from_the_recorded_accounting():
    from hpc_launch.dialects.gridengine import GridEngine

    acct = GridEngine.parse_accounting((SCHED / "sge_qacct_timeout.txt").read_text())
    # the job shell reports the SIGKILL that h_rt sends: only the state says it was the time limit
    d = diagnose(_log("bash-killed.log"), exit_code=acct.exit_code, comment=acct.comment, state=acct.state)
    assert d.top.cause.key == "walltime" and d.top.line_no is None
    assert [f.cause.key for f in d.findings[1:]] == ["host_oom"]


@pytest.mark.parametrize("name", ["slurm_sbatch_error_too_many_nodes.stderr.txt", "sge_qsub_error_bad_pe.stderr.txt"])
def test_recorded_submit_refusals_are_queue_limits(name):
    d = diagnose((SCHED / name).read_text())
    assert d.top.cause.key == "queue_limit"


def test_slurm_out_of_memory_state_reaches_doctor_through_the_record_comment():
    from hpc_launch.dialects.slurm import state_of

    info = state_of("OUT_OF_MEMORY")
    d = diagnose("training...\n", exit_code=0, comment=info.comment, state=info.state)
    assert d.top.cause.key == "host_oom" and d.top.evidence == "scheduler: out of memory (Slurm: OUT_OF_MEMORY)"


def test_exit_137_alone_is_a_likely_oom_kill_but_not_after_a_cancel():
    d = diagnose("step=10 loss=1.0\n", exit_code=137, state="failed")
    assert d.top.cause.key == "host_oom" and not d.top.strong
    assert d.top.text.startswith("a rank was killed with SIGKILL that nobody asked for")
    assert diagnose(_log("bash-killed.log"), exit_code=137, state="cancelled").findings == ()


# ---- precedence ----------------------------------------------------------------------------------


def test_hpc_launchs_own_error_beats_the_python_error_it_explains():
    text = _log("hpc-launch-not-installed.log")
    assert "ModuleNotFoundError: No module named 'hpc_launch'" in text
    assert [f.cause.key for f in diagnose(text).findings] == ["hpc_launch_not_installed"]  # one line, one cause


def test_a_killed_rank_beats_the_collective_timeouts_it_causes_in_the_others():
    d = diagnose(_log("nccl-watchdog-timeout.log") + _log("slurm-oom-kill-22.05.log"), exit_code=137, state="failed")
    assert [f.cause.key for f in d.findings] == ["host_oom", "collective_timeout"]
    lines = report_lines(d)
    assert len(lines) == 4 and lines[3] == "also seen: a collective timed out (NCCL/gloo) (line 1)"


def test_a_missing_compiler_beats_the_build_failure_it_causes():
    d = diagnose(_log("deepspeed-jit-no-compiler.log"))
    assert [f.cause.key for f in d.findings] == ["jit_no_compiler", "jit_build"]


def test_a_strong_cause_beats_a_bare_kill_signal():
    d = diagnose(_log("bash-killed.log") + _log("cuda-out-of-memory.log"), exit_code=137, state="failed")
    assert [f.cause.key for f in d.findings] == ["cuda_oom", "host_oom"]


def test_the_wrong_interface_and_the_generic_rendezvous_failure_are_one_cause():
    assert [f.cause.key for f in diagnose(_log("gloo-wrong-interface.log")).findings] == ["wrong_interface"]


def test_a_compatible_cuda_minor_version_is_not_a_failure():
    assert not diagnose(_log("deepspeed-cuda-minor-mismatch-accepted.log")).found


def test_the_batch_fix_computes_the_size_that_fits():
    d = diagnose(_log("train-batch-mismatch.log"))
    assert "(100 != 8 x 1 x 2)" in d.top.text and "micro-batch x grad-accum x ranks = 16" in d.top.fix


# ---- unknown ------------------------------------------------------------------------------------


def test_an_unknown_failure_says_so_and_points_at_the_last_error_lines():
    text = "[hpc-launch] job 7 on vm\n[hpc-train] step=10 loss=1.0\n" + _log("unknown-shell-missing-file.log")
    d = diagnose(text, exit_code=2, state="failed")
    assert not d.found
    lines = report_lines(d)
    assert lines[0].startswith("cause: not recognised")
    assert (
        "evidence: line 3: ls: cannot access '/data/imagenet/train/n01440764/missing.JPEG': "
        "No such file or directory" in lines
    )
    assert not any("step=10" in line for line in lines)
    assert summary_lines(d)[0].startswith("cause     not recognised")


def test_a_python_exception_names_the_rank_and_is_no_cause_when_the_job_ended_well():
    d = diagnose(_log("deepspeed-bf16-batchnorm-h200.log"), exit_code=1, state="failed")
    assert report_lines(d)[0] == (
        "cause: rank 0 raised RuntimeError: Expected running_mean to have type BFloat16 but got Float"
    )
    assert "a rank cannot reach MASTER_ADDR" in report_lines(d)[-1]  # the refused connection: only also seen
    handled = "[hpc-train] step=10 loss=1.0\nValueError: a warning a library printed\ntraining finished\n"
    assert diagnose(handled, exit_code=0, state="done").succeeded
    assert not diagnose(handled, state="done").found
    assert diagnose(handled, exit_code=1).top.cause.key == "python_exception"


def test_summary_lines_fit_the_summary_block_column():
    lines = summary_lines(diagnose(_log("slurm-time-limit.log"), state="timeout"))
    assert [line[:10] for line in lines] == ["cause     ", "fix       ", "evidence  "]


def test_doctor_is_light_and_fast():
    import subprocess
    import sys

    code = (
        "import sys, hpc_launch.doctor; print(sorted(m for m in "
        "('torch', 'deepspeed', 'typer', 'rich') if m in sys.modules))"
    )
    assert (
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "[]"
    )
    big = ("[hpc-train] step=1 loss=1.0 samples_per_sec=100\n" * 200_000) + _log("deepspeed-batch-assertion.log")
    # this process's CPU time (1.0 s here): a pattern that backtracks over 200,000 lines takes
    # minutes; the wall clock also counts what else the machine runs (10 s in one loaded CI run)
    start = time.process_time()
    assert diagnose(big, exit_code=1, state="failed").top.cause.key == "batch_size"
    assert time.process_time() - start < 5


# ---- the command ----------------------------------------------------------------------------------


def _doctor(capsys, *args):
    from hpc_launch import cli

    with pytest.raises(SystemExit) as exit_:
        cli.main(["doctor", *args])
    out = capsys.readouterr()
    return exit_.value.code, out.out, out.err


def test_the_command_on_a_log_file(tmp_path, capsys):
    log = tmp_path / "train.o4242"
    log.write_bytes((DOCTOR / "deepspeed-batch-assertion.log").read_bytes())
    (tmp_path / "train.o4242.exitcode").write_text("1 train-20261123-004400-000.sh\n")
    rc, out, _ = _doctor(capsys, str(log))
    assert rc == 0
    lines = out.splitlines()
    assert re.match(r"^cause: .*batch", lines[0]) and lines[1].startswith("fix: ")
    assert lines[2].startswith("evidence: line 16: [rank0]: AssertionError: Check batch related parameters.")

    (tmp_path / "other.log").write_bytes((DOCTOR / "unknown-shell-missing-file.log").read_bytes())
    rc, out, _ = _doctor(capsys, str(tmp_path / "other.log"))
    assert rc == 1 and out.startswith("cause: not recognised")


def test_the_command_on_a_recorded_job(tmp_path, capsys):
    from hpc_launch.records import JobRecord, JobStore

    log = tmp_path / "novenv.o27217"
    log.write_bytes((DOCTOR / "hpc-launch-not-installed.log").read_bytes())
    JobStore().add(
        JobRecord(
            job_id="27217",
            cluster="local",
            dialect="none",
            host="localhost",
            name="novenv",
            workdir=str(tmp_path),
            script_path=str(
                tmp_path / ".hpc-launch" / "novenv-20261123-004536-393.sh"
            ),  # the name the log's first line gives
            log_path=str(log),
            exit_path=str(log) + ".exitcode",
            submit_time=time.time() - 60,
            state="failed",
            exit_code=3,
            end_time=time.time(),
        )
    )
    rc, out, err = _doctor(capsys, "27217")
    assert rc == 0 and err == ""
    assert out.splitlines() == [
        "cause: hpc-launch is not installed in the job's Python environment "
        "(/tmp/dcap/emptyvenv/bin/python), which runs the training entrypoint",
        "fix: pass --venv DIR of a virtualenv that has it (pip install "
        "'hpc-launch[train]' there), or set the profile's python.venv",
        "evidence: line 5: [hpc-launch] error: hpc-launch is not installed in the job's Python environment "
        "(/tmp/dcap/emptyvenv/bin/python): pip install 'hpc-launch[train]' there, or pass --venv",
    ]


def test_the_command_on_a_job_that_never_wrote_a_log_uses_the_scheduler_comment(tmp_path, capsys):
    from hpc_launch.records import JobRecord, JobStore

    JobStore().add(
        JobRecord(
            job_id="65.pbshead",
            cluster="abci",
            dialect="pbspro",
            host="localhost",
            name="train",
            workdir=str(tmp_path),
            script_path=str(tmp_path / "train.sh"),
            log_path=str(tmp_path / "train.o65"),
            exit_path=str(tmp_path / "train.o65.exitcode"),
            submit_time=time.time(),
            state="failed",
            comment=_never_runs_comment(),
        )
    )
    rc, out, _ = _doctor(capsys, "65")
    assert rc == 0 and out.splitlines()[0].startswith("cause: the scheduler will not run the job as asked")


def test_the_command_on_an_unknown_job_is_one_line(capsys):
    rc, out, err = _doctor(capsys, "999999")
    assert rc == 2 and out == ""
    assert err == "hpc-launch: error: no record of job 999999 (`hpc-launch list` shows the recorded jobs)\n"


def test_the_command_on_a_binary_log_prints_no_control_bytes(tmp_path, capsys):
    """A log is the job's raw output: colours, bells and NULs in it must reach the terminal as
    text (\\x1b), never act on it; the log's UTF-8 text stays as it is."""
    log = tmp_path / "train.o77"
    log.write_bytes(
        b"\x00\x01\xff binary junk\n"
        b"\x1b[31mRuntimeError: caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac failed\x1b[0m\x07\x00\n"
        b"[hpc-launch] error: network interface eth\x1b[2J0 (profile key net_if) has no IPv4 address on "
        b"vm\x07; this node has: lo\x1b]0;owned\x07\n"
    )
    rc, out, _ = _doctor(capsys, str(log))
    assert rc == 0
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", out), repr(out)
    assert "net_if eth\\x1b[2J0 has no IPv4 address on vm\\x07" in out  # the cause line's values too
    assert "evidence: line 3: [hpc-launch] error: network interface eth\\x1b[2J0" in out

    log.write_bytes(
        b"\x00\x01\xff binary junk\n\x1b[31mRuntimeError: caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac\x1b[0m\x07\x00\n"
    )
    rc, out, _ = _doctor(capsys, str(log))
    assert rc == 1 and not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", out), repr(out)
    assert "evidence: line 2: \\x1b[31mRuntimeError: café 日本\\x1b[0m\\x07\\x00" in out.splitlines()


def test_a_walltime_kill_with_no_scheduler_says_hpc_launch_ended_it():
    # the line templates/body/walltime.sh.j2 prints on `local` and `pods`, where no scheduler runs the job
    log = (
        "ran\n[hpc-launch] walltime 00:00:04 reached: no scheduler here, so hpc-launch ends the job "
        "(SIGTERM now, SIGKILL in 30 s to what still runs)\n"
    )
    d = diagnose(log, exit_code=142, state="timeout", comment="walltime 00:00:04 reached (no scheduler here)")
    assert d.top.cause.key == "walltime" and d.top.line_no == 2
    assert "scheduler killed" not in d.top.text and "hpc-launch ended it at the walltime it was given" in d.top.text
    assert "queue's limit" not in d.top.fix and "--walltime" in d.top.fix
    assert [f.cause.key for f in d.findings] == ["walltime"]  # the state's timeout is the same finding, not another
