"""--notify (hpc_launch/notify/__init__.py): the job itself posts its start and end to a webhook whose URL
is a secret. Real parts: real `local` jobs, a real HTTP server in a thread, the real job store."""

from __future__ import annotations

import http.server
import json
import socket
import sqlite3
import subprocess
import threading
import time
from pathlib import Path
from typing import List

import pytest
from inproc import run_cli

from hpc_launch import notify
from hpc_launch.site import profiles
from hpc_launch.errors import SpecError
from hpc_launch.render import render
from hpc_launch.spec import JobSpec, resolve, spec_from

STAMP = "20260101-000000-000"


class Hook:
    """A webhook on 127.0.0.1: records each POST's body and, while the poster is alive, every
    process's argv (the URL must be on none)."""

    def __init__(self, secret_path: str, port: int = 0, host: str = "127.0.0.1") -> None:
        self.bodies: List[bytes] = []
        self.leaks: List[str] = []
        hook = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
                    try:
                        if secret_path.encode() in cmdline.read_bytes():
                            hook.leaks.append(str(cmdline))
                    except OSError:
                        pass
                hook.bodies.append(body)
                self.send_response(200)
                self.end_headers()

            def log_message(self, *_a):
                pass

        self.server = http.server.ThreadingHTTPServer((host, port), Handler)
        self.url = f"http://{host}:{self.server.server_port}{secret_path}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def texts(self) -> List[str]:
        return [json.loads(b)["text"] for b in self.bodies]


def _submit(bin_, work, env, script, *extra):
    r = run_cli(  # in-process (tests/inproc.py): the job runs as its own, with this environment
        ["submit", "--cluster", "local", "--script", script, "--gpus-per-node", "1", "--name", script[:-3], *extra],
        env=env,
        cwd=work,
    )
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def _wait_end(work: Path, name: str, job: str, until=lambda: True, timeout=120.0) -> str:
    exit_file = work / f"{name}.o{job}.exitcode"
    deadline = time.monotonic() + timeout
    while not (exit_file.exists() and until()):
        assert time.monotonic() < deadline, f"job {job} never ended: {(work / f'{name}.o{job}').read_text()[-2000:]}"
        time.sleep(0.1)
    return exit_file.read_text().split()[0]


def _everything_written(work: Path, db: Path) -> bytes:
    """Every file the submit and the job wrote (script, capsule, log, exit code) and the job store."""
    files = [p for p in work.rglob("*") if p.is_file()] + list(db.parent.glob("jobs.sqlite*"))
    return b"".join(p.read_bytes() for p in files)


def test_a_job_posts_its_start_and_end_and_the_url_is_written_nowhere(hpc_launch_bin, notify_sandbox):
    work, env, db = notify_sandbox
    hook = Hook("/hook/T0k3n-s3cr3t-path")
    env["MY_WEBHOOK"] = hook.url
    ok = _submit(hpc_launch_bin, work, env, "ok.py", "--notify", "MY_WEBHOOK")
    bad = _submit(hpc_launch_bin, work, env, "fail.py", "--notify", "MY_WEBHOOK")
    assert _wait_end(work, "ok", ok, until=lambda: len(hook.bodies) >= 4) == "0"
    assert _wait_end(work, "fail", bad, until=lambda: len(hook.bodies) >= 4) == "3"

    texts = hook.texts()
    assert len(texts) == 4, texts
    assert f"[hpc-launch] ok (job {ok}, local, {socket.gethostname()}): started" in texts
    assert f"[hpc-launch] fail (job {bad}, local, {socket.gethostname()}): started" in texts
    done = next(t for t in texts if f"job {ok}," in t and "started" not in t)
    assert ": done, after " in done and "doctor" not in done
    failed = next(t for t in texts if f"job {bad}," in t and "started" not in t)
    assert ": failed with exit code 3, after " in failed and failed.endswith(f"; next: hpc-launch doctor {bad}")
    assert "ran" not in failed  # nothing the job printed is sent

    assert hook.leaks == [], "the URL was on a process's command line"
    assert b"T0k3n" not in _everything_written(work, db)
    rows = sqlite3.connect(str(db)).execute("SELECT * FROM jobs").fetchall()
    assert len(rows) == 2 and "T0k3n" not in repr(rows)
    assert not list((work / ".hpc-launch").glob("*.secrets")), "each job reads and deletes its secrets file"


def test_a_dead_webhook_changes_nothing_but_one_line_in_the_log(hpc_launch_bin, notify_sandbox):
    work, env, _ = notify_sandbox
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env["HPC_LAUNCH_NOTIFY_PAUSES"] = "0.2,0.3"  # the 3 tries, without 7 s of pauses per message
    env["MY_WEBHOOK"] = f"http://127.0.0.1:{port}/hook/T0k3n-s3cr3t-path"
    ok = _submit(hpc_launch_bin, work, env, "ok.py", "--notify", "MY_WEBHOOK")
    bad = _submit(hpc_launch_bin, work, env, "fail.py", "--notify", "MY_WEBHOOK")

    def said_twice(name, job):  # the end is posted just after the exit code is written
        return lambda: (work / f"{name}.o{job}").read_text().count("[hpc-launch] notify:") >= 2

    assert _wait_end(work, "ok", ok, until=said_twice("ok", ok)) == "0"
    assert _wait_end(work, "fail", bad, until=said_twice("fail", bad)) == "3"
    time.sleep(0.5)
    for name, job in (("ok", ok), ("fail", bad)):
        log = (work / f"{name}.o{job}").read_text()
        said = [line for line in log.splitlines() if "notify" in line]
        assert len(said) == 2, log[-3000:]  # one for the start, one for the end
        assert "the webhook in MY_WEBHOOK did not take the start message" in said[0]
        assert "the webhook in MY_WEBHOOK did not take the end message" in said[1]
        assert "T0k3n" not in log and str(port) not in log


def test_without_notify_the_script_has_none_of_it(tmp_path, monkeypatch):
    spec = JobSpec(cluster="local", nodes=1, workdir=str(tmp_path), venv="/opt/venv")
    text = render(resolve(spec, profiles.load("local"), cwd=str(tmp_path)), stamp=STAMP).text
    assert "hpc_launch_notify" not in text and "hpc_launch.notify" not in text


@pytest.mark.parametrize("cluster", ["abci", "miyabi", "polaris", "slurm", "local"])
def test_every_site_script_names_the_variable_never_the_url(cluster, tmp_path, monkeypatch):
    monkeypatch.setenv("MY_WEBHOOK", "https://hooks.example.org/hooks/T0k3n")
    spec = JobSpec(cluster=cluster, nodes=1, group="g1", notify="MY_WEBHOOK", workdir=str(tmp_path), venv="/opt/venv")
    job = resolve(spec, profiles.load(cluster), cwd=str(tmp_path))
    assert job.pass_env == ["MY_WEBHOOK"]  # the URL travels as a --pass-env secret
    script = render(job, stamp=STAMP)
    assert "T0k3n" not in script.text and "T0k3n" not in " ".join(script.submit_argv)
    assert "--url-from MY_WEBHOOK" in script.text and "hpc_launch_notify --event start" in script.text
    # the start is sent once the secrets are read, the end from the EXIT trap
    assert script.text.index("HPC_LAUNCH_SECRETS=") < script.text.index("hpc_launch_notify --event start")
    path = tmp_path / f"{cluster}.sh"
    path.write_text(script.text)
    out = subprocess.run(["shellcheck", "-S", "style", "-s", "bash", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout


def test_a_python_without_hpc_launch_is_one_line_of_ours_not_a_module_error(tmp_path, monkeypatch):
    monkeypatch.setenv("MY_WEBHOOK", "https://hooks.example.org/hooks/T0k3n")
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    # a job Python that lacks hpc_launch: what `python -c 'import hpc_launch.notify'` does there
    (venv / "bin" / "python").write_text("#!/bin/sh\necho 'No module named hpc_launch' >&2\nexit 1\n")
    (venv / "bin" / "python").chmod(0o755)
    spec = JobSpec(cluster="local", nodes=1, notify="MY_WEBHOOK", workdir=str(tmp_path), venv=str(venv))
    text = render(resolve(spec, profiles.load("local"), cwd=str(tmp_path)), stamp=STAMP).text
    function = text[text.index("hpc_launch_notify() {") : text.index("\n}\n", text.index("hpc_launch_notify() {")) + 3]
    body = f"set -u\nJOB_ID=1\nHPC_LAUNCH_SCRIPT=x.sh\n{function}hpc_launch_notify --event start\necho rc=$?\n"
    r = subprocess.run(["bash", "-c", body], capture_output=True, text=True, timeout=30)
    assert r.stdout.strip() == "rc=0"
    assert r.stderr.strip() == f"[hpc-launch] note: no notification: hpc_launch is not importable by {venv}/bin/python"


def test_the_user_default_and_the_project_key(monkeypatch):
    monkeypatch.setenv("HPC_LAUNCH_NOTIFY", "USER_HOOK")
    assert spec_from({}, {}).notify == "USER_HOOK"
    assert spec_from({"notify": "PROJECT_HOOK"}, {}).notify == "PROJECT_HOOK"
    assert spec_from({"notify": "PROJECT_HOOK"}, {"notify": "CLI_HOOK"}).notify == "CLI_HOOK"
    monkeypatch.delenv("HPC_LAUNCH_NOTIFY")
    assert spec_from({}, {}).notify is None


def test_the_project_file_key_is_read(tmp_path):
    from hpc_launch.project_config import load_project_config

    f = tmp_path / "hpc-launch.yaml"
    f.write_text("cluster: local\nnotify: MY_WEBHOOK\n")
    assert load_project_config(f)["notify"] == "MY_WEBHOOK"


@pytest.mark.parametrize(
    ("name", "needle"),
    [("NOT_SET_HOOK", "--notify NOT_SET_HOOK: it is not set in this shell"), ("1BAD", "--notify '1BAD' is not")],
)
def test_a_bad_variable_is_refused_before_anything_is_written(tmp_path, monkeypatch, name, needle):
    monkeypatch.delenv("NOT_SET_HOOK", raising=False)
    spec = JobSpec(cluster="local", nodes=1, notify=name, workdir=str(tmp_path), venv="/opt/venv")
    with pytest.raises(SpecError, match=needle.replace("'", "'")):
        resolve(spec, profiles.load("local"), cwd=str(tmp_path))


# ---- the message's words, the two body formats, the mask ------------------------------------


def _end(rc, script="train-1.sh", chain=1, deadline=None, now=1000.0):
    return notify.message(
        event="end", name="t", job_id="42", cluster="c", host="h", script=script, chain=chain, rc=rc,
        elapsed_s=3725, deadline=deadline, now=now,
    )  # fmt: skip


def test_each_ending_has_its_words():
    assert _end(0) == "[hpc-launch] t (job 42, c, h): done, after 1h02m05s"
    assert _end(75, "train-1-link2.sh", chain=3).startswith(
        "[hpc-launch] t (job 42, c, h): link 2 of 3 ended: resumable"
    )
    assert ": link 1 of 3 done" in _end(0, "train-1.sh", chain=3)
    assert "timeout (exit code 143)" in _end(143, deadline=900.0, now=1000.0)
    assert "timeout (exit code 143), after 1h02m05s; next: hpc-launch doctor 42" in _end(143, deadline=900.0)
    assert _end(143, deadline=1900.0, now=1000.0).endswith("cancelled (exit code 143), after 1h02m05s")
    assert "cancelled (exit code 130)" in _end(130)
    assert _end(3).endswith("failed with exit code 3, after 1h02m05s; next: hpc-launch doctor 42")
    start = notify.message(event="start", name="t", job_id="42", cluster="c", host="h", script="t-link2.sh", chain=2)
    assert start == "[hpc-launch] t (job 42, c, h): link 2 of 2 started"


def test_slack_gets_json_and_ntfy_plain_text():
    assert notify.payload("https://hooks.slack.com/services/A/B", "hi") == (
        "https://hooks.slack.com/services/A/B",
        b'{"text": "hi"}',
        "application/json",
    )
    assert notify.payload("https://ntfy.sh/topic", "hi")[1:] == (b"hi", "text/plain; charset=utf-8")
    assert notify.payload("ntfy+https://push.example.org/topic", "hi") == (
        "https://push.example.org/topic",
        b"hi",
        "text/plain; charset=utf-8",
    )


def test_a_failure_never_names_the_url(monkeypatch, capsys):
    url = "https://user:pw@hooks.example.org/hooks/T0k3n?k=Q5ecret"
    assert "T0k3n" not in notify.mask(f"can't reach {url} (hooks.example.org/hooks/T0k3n)", url)
    assert notify.send("file:///etc/T0k3n", "x").startswith("the value is not an http(s) URL nor a mail address")
    monkeypatch.setattr(notify, "PAUSES_S", (0.0, 0.0))
    monkeypatch.setenv("MY_WEBHOOK", "http://127.0.0.1:9/T0k3n")  # port 9 (discard): nobody listens
    assert notify.main(["--url-from", "MY_WEBHOOK", "--event", "end", "--rc", "1"]) == 0
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "did not take the end message" in err and "T0k3n" not in err
    monkeypatch.delenv("MY_WEBHOOK")
    assert notify.main(["--url-from", "MY_WEBHOOK", "--event", "start"]) == 0
    assert "MY_WEBHOOK is not set in the job" in capsys.readouterr().err


def test_the_job_side_imports_only_the_standard_library():
    import ast
    import sys

    # what the job imports to send and to diagnose: the package's own modules, and they only the standard library
    code = "import sys; b = set(sys.modules); import hpc_launch.notify, hpc_launch.notify.cause; " + (
        "print(sorted({m.split('.')[0] for m in set(sys.modules) - b} - set(sys.stdlib_module_names)))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/", timeout=60)
    assert r.stdout.strip() == "['hpc_launch']", r.stderr
    for module in ("__init__", "mail", "outbox", "cause"):
        tree = ast.parse((Path(notify.__file__).parent / f"{module}.py").read_text())
        names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        assert names - {"__future__", "doctor", "protocol"} <= set(sys.stdlib_module_names), (module, names)


def test_the_pauses_between_tries_are_two_short_numbers_or_the_default():
    assert notify.pauses({}) == notify.PAUSES_S == (2.0, 5.0)
    assert notify.pauses({notify.PAUSES_ENV: "0.2,0.3"}) == (0.2, 0.3)
    for bad in ("", "1", "1,2,3", "x,1", "-1,2", "1,11", "nan,1"):
        assert notify.pauses({notify.PAUSES_ENV: bad}) == notify.PAUSES_S, bad
