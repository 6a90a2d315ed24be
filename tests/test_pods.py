"""`--cluster pods` without the testbed: hosts that announce themselves (hpc_launch/gather.py), the
checks that stop a bad pods job before it starts, and what the rendered script does."""

from __future__ import annotations

import shutil
import socket
import subprocess
import threading

import pytest

from hpc_launch import gather
from hpc_launch.site import profiles
from hpc_launch.errors import SpecError
from hpc_launch.render import render
from hpc_launch.spec import JobSpec, resolve


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listen(port, **kw):
    out = {}
    t = threading.Thread(target=lambda: out.update(result=gather.listen(port, bind="127.0.0.1", **kw)))
    t.start()
    return t, out


def test_named_workers_announce_in_any_order_and_the_hostfile_keeps_the_given_order(tmp_path):
    port = _port()
    t, out = _listen(port, expect=["pod2", "pod3"], count=0, timeout=20)
    assert gather.announce("127.0.0.1", port, name="pod3", address="10.0.0.13", timeout=10, retry_every=0.05) == (
        "pod3",
        "10.0.0.13",
    )
    gather.announce("127.0.0.1", port, name="pod2", address="10.0.0.12", timeout=10, retry_every=0.05)
    t.join(10)
    assert out["result"] == ({"pod3": "10.0.0.13", "pod2": "10.0.0.12"}, [])


def test_announce_waits_for_a_listener_that_starts_later_and_defaults_to_its_own_address():
    port = _port()
    result = {}
    worker = threading.Thread(
        target=lambda: result.update(r=gather.announce("127.0.0.1", port, name="w1", timeout=10, retry_every=0.05))
    )
    worker.start()
    threading.Event().wait(0.3)  # the worker is already retrying
    got, missing = gather.listen(port, expect=[], count=1, timeout=10, bind="127.0.0.1")
    worker.join(10)
    assert got == {"w1": "127.0.0.1"} and missing == [] and result["r"] == ("w1", "127.0.0.1")


def test_missing_workers_are_named_and_strangers_refused(tmp_path):
    port = _port()
    t, out = _listen(port, expect=["pod2", "pod3"], count=0, timeout=1.5)
    with pytest.raises(gather.Refused, match="answered 'unexpected'"):
        gather.announce("127.0.0.1", port, name="intruder", address="10.9.9.9", timeout=5, retry_every=0.05)
    gather.announce("127.0.0.1", port, name="pod2", address="10.0.0.12", timeout=5, retry_every=0.05)
    t.join(10)
    assert out["result"] == ({"pod2": "10.0.0.12"}, ["pod3"])


def test_listen_command_names_the_pods_that_did_not_report(tmp_path, capsys):
    rc = gather._main(
        [
            "listen",
            "--port",
            str(_port()),
            "--self",
            "10.0.0.11",
            "--expect",
            "pod2,pod3",
            "--timeout",
            "0.3",
            "-o",
            str(tmp_path / "hostfile"),
        ]
    )
    assert rc == 3 and not (tmp_path / "hostfile").exists()
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "error: pod2, pod3 did not announce within 0 s" in err and "hpc-launch announce 10.0.0.11:" in err


@pytest.mark.parametrize(
    "line",
    [
        "hpc-launch-announce pod2",
        "hpc-launch-announce pod2 10.0.0.1; rm",
        "hpc-launch-announce -x 10.0.0.1",
        "hello pod2 10.0.0.1",
        "hpc-launch-announce pod2 $(id)",
    ],
)
def test_announcements_that_are_not_a_name_and_an_address_are_ignored(line):
    assert gather.parse_line(line) is None


def _pods(**kw) -> JobSpec:
    return JobSpec(**{"cluster": "pods", "workdir": "/w", **kw})


@pytest.mark.parametrize(
    "spec, message",
    [
        (_pods(hosts=["a", "b"], env={"X": "$(id)"}), "the value of X holds"),
        (_pods(hosts=["a", "b"], env={"X": 'a"b'}), "the value of X holds"),
        (_pods(hosts=["a", "b"], env={"X": " lead"}), "the value of X holds"),
        (_pods(gather=29400), "--gather with one node"),
        (_pods(gather=80, nodes=2), "the port must be 1024-65535"),
        (JobSpec(cluster="slurm", gather=29400, nodes=2, workdir="/w"), "--gather is for machines with no scheduler"),
        (_pods(), "pods has no node list"),
    ],
)
def test_bad_pods_jobs_stop_before_anything_is_written(spec, message):
    with pytest.raises(SpecError, match=message.replace("(", r"\(").replace("$", r"\$")) as exc:
        resolve(spec, profiles.load(spec.cluster))
    assert "\n" not in exc.value.one_line()


def test_a_value_the_remote_shell_would_read_is_fine_on_one_node():
    job = resolve(_pods(hosts=["a"], env={"X": "$(id)"}), profiles.load("pods"))
    assert job.env["X"] == "$(id)"


def test_gathered_script_listens_then_launches_and_passes_shellcheck(tmp_path):
    job = resolve(_pods(hosts=["pod1", "pod2", "pod3"], gather=29400), profiles.load("pods"))
    text = render(job, stamp="20260101-000000-000").text
    assert '-m hpc_launch.gather listen --port 29400 --self "$HPC_LAUNCH_SELF" --expect pod2,pod3 --count 2' in text
    assert "printf '%s slots=1\\n' pod1" not in text  # the hostfile comes from the announcements
    counted = render(resolve(_pods(nodes=3, gather=29400), profiles.load("pods")), stamp="20260101-000000-000").text
    assert "--expect '' --count 2" in counted
    for t in (text, counted):
        assert "pdsh -S" in t and "hpc_launch_stop_ranks" in t
        if shutil.which("shellcheck"):
            (tmp_path / "s.sh").write_text(t)
            r = subprocess.run(["shellcheck", "-S", "warning", str(tmp_path / "s.sh")], capture_output=True, text=True)
            assert r.returncode == 0, r.stdout


def test_the_job_line_with_its_start_time_still_names_the_script_for_the_log_reader():
    from hpc_launch.logs import JOB_LINE

    text = render(resolve(_pods(hosts=["a"]), profiles.load("pods")), stamp="20260101-000000-000").text
    echo = next(line for line in text.splitlines() if line.startswith('echo "[hpc-launch] job'))
    out = subprocess.run(
        ["bash", "-c", f"JOB_ID=7 HPC_LAUNCH_SCRIPT=train-x.sh; {echo}"], capture_output=True, check=True
    ).stdout
    m = JOB_LINE.search(out)
    assert m and m.group(1) == b"train-x.sh", out
    assert b", t=" in out
