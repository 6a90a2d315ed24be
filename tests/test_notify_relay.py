"""--notify, the gaps of issue 19 part 3: a failure's doctor cause and fix, e-mail through a real
local SMTP server, the outbox and its relay (`hpc-launch status` sends what the job could not,
exactly once, and says what waits and why). Real parts: real `local` jobs, a real HTTP server and
a real SMTP server in threads, the real job store, the real `hpc-launch status` processes."""

from __future__ import annotations

import base64
import email
import email.policy
import json
import socket
import socketserver
import subprocess
import threading
import time
from pathlib import Path
from typing import List

import pytest
from inproc import run_cli

from hpc_launch import notify
from hpc_launch.site import profiles
from hpc_launch.notify import mail as notify_email, outbox as notify_outbox, relay as notify_relay
from hpc_launch.records import JobRecord
from hpc_launch.render import render
from hpc_launch.spec import JobSpec, resolve
from test_notify import STAMP, Hook, _everything_written, _submit, _wait_end


class Smtp:
    """A small real SMTP server on 127.0.0.1 (EHLO, AUTH PLAIN, MAIL, RCPT, DATA): keeps each
    message as received, and each AUTH's decoded credentials."""

    def __init__(self) -> None:
        self.messages: List[email.message.Message] = []
        self.envelopes: List[tuple] = []
        self.auths: List[bytes] = []
        smtp = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self):
                def say(line: str) -> None:
                    self.wfile.write(line.encode() + b"\r\n")

                say("220 test.local ESMTP")
                sender, rcpts = "", []
                while True:
                    raw = self.rfile.readline()
                    if not raw:
                        return
                    cmd = raw.decode().strip()
                    verb = cmd.split(" ", 1)[0].upper()
                    if verb in ("EHLO", "HELO"):
                        say("250-test.local")
                        say("250 AUTH PLAIN")
                    elif verb == "AUTH":
                        smtp.auths.append(base64.b64decode(cmd.split()[2]))
                        say("235 2.7.0 accepted")
                    elif verb == "MAIL":
                        sender = cmd[cmd.index(":") + 1 :].strip()
                        say("250 ok")
                    elif verb == "RCPT":
                        rcpts.append(cmd[cmd.index(":") + 1 :].strip())
                        say("250 ok")
                    elif verb == "DATA":
                        say("354 end with <CRLF>.<CRLF>")
                        lines = []
                        while True:
                            line = self.rfile.readline()
                            if line in (b".\r\n", b""):
                                break
                            lines.append(line[1:] if line.startswith(b"..") else line)
                        smtp.messages.append(email.message_from_bytes(b"".join(lines), policy=email.policy.default))
                        smtp.envelopes.append((sender, list(rcpts)))
                        say("250 queued")
                    elif verb == "QUIT":
                        say("221 bye")
                        return
                    else:
                        say("250 ok")

        class Server(socketserver.ThreadingTCPServer):
            allow_reuse_address = True
            daemon_threads = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _status(bin_, work, env, *args) -> List[dict]:
    r = run_cli(["status", "--json", *args], env=env, cwd=work)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _relay_profile(tmp_path: Path, route: str) -> str:
    path = tmp_path / f"route-{route}.yaml"
    path.write_text(f"name: local\nnotify_route: {route}\n")
    return str(path)


# ---- a failure carries doctor's cause and fix ------------------------------------------------


def test_a_failure_says_doctors_cause_and_fix(hpc_launch_bin, notify_sandbox):
    work, env, _ = notify_sandbox
    (work / "nodeps.py").write_text(
        "import sys\nprint(\"ModuleNotFoundError: No module named 'deepspeed'\", flush=True)\nsys.exit(1)\n"
    )
    hook = Hook("/hook/T0k3n-s3cr3t-path")
    env["MY_WEBHOOK"] = hook.url
    job = _submit(hpc_launch_bin, work, env, "nodeps.py", "--notify", "MY_WEBHOOK")
    assert _wait_end(work, "nodeps", job, until=lambda: len(hook.bodies) >= 2) == "1"
    end = hook.texts()[-1].split("\n")
    assert ": failed with exit code 1, after " in end[0]
    assert end[0].endswith(f"; next: hpc-launch doctor {job}")
    assert end[1] == (
        "cause: the job's Python has no deepspeed: no virtualenv (or the wrong one) was activated in the job"
    )
    assert end[2].startswith("fix: activate the environment that has torch and DeepSpeed: --venv DIR")


def test_the_cause_is_bounded_in_time_and_never_fails(tmp_path, monkeypatch):
    from hpc_launch.notify import cause as notify_cause

    log = tmp_path / "x.o1"
    log.write_text("ModuleNotFoundError: No module named 'torch'\n")
    assert notify_cause.cause_lines(str(log), 1)[0].startswith("cause: the job's Python has no torch")
    assert notify_cause.cause_lines(str(log), 1, timeout=0.001) == []  # too slow: no lines, no error
    assert notify_cause.cause_lines(str(tmp_path / "missing"), 1) == []
    big = tmp_path / "big.o1"  # the middle of a long log is skipped, its top and end are read
    with big.open("w") as fh:
        fh.write("ModuleNotFoundError: No module named 'torch'\n")
        for _ in range(60000):
            fh.write("y" * 99 + "\n")
    assert notify_cause.cause_lines(str(big), 1)[0].startswith("cause: the job's Python has no torch")


# ---- e-mail ---------------------------------------------------------------------------------


def test_a_job_mails_its_start_and_end_through_a_real_smtp_server(hpc_launch_bin, notify_sandbox):
    work, env, db = notify_sandbox
    smtp = Smtp()
    env["MY_MAIL"] = (
        f"smtp://ops%40lab:Pa55-s3cret@127.0.0.1:{smtp.port}/?to=alice@example.org,bob@example.org&from=hpc@example.org"
    )
    bad = _submit(hpc_launch_bin, work, env, "fail.py", "--notify", "MY_MAIL")
    assert _wait_end(work, "fail", bad, until=lambda: len(smtp.messages) >= 2) == "3"
    start, end = smtp.messages
    host = socket.gethostname()
    assert start["Subject"] == f"[hpc-launch] fail (job {bad}, local, {host}): started"
    assert start["From"] == "hpc@example.org" and start["To"] == "alice@example.org, bob@example.org"
    assert end["Subject"].startswith(f"[hpc-launch] fail (job {bad}, local, {host}): failed with exit code 3")
    assert end.get_content().strip() == end["Subject"]  # doctor knows no cause for a bare exit 3
    assert smtp.envelopes[1] == ("<hpc@example.org>", ["<alice@example.org>", "<bob@example.org>"])
    assert smtp.auths == [b"\0ops@lab\0Pa55-s3cret"] * 2  # the login went to the server, and nowhere else
    assert b"Pa55-s3cret" not in _everything_written(work, db)
    log = (work / f"fail.o{bad}").read_text()
    assert "notify" not in log


def test_the_mail_forms():
    assert notify_email.parse("mailto:a@x.org,b@y.org?from=me@x.org") == (
        "smtp", "localhost", 25, None, None, ["a@x.org", "b@y.org"], "me@x.org",
    )  # fmt: skip
    assert notify_email.parse("smtps://u%40d:p%2Fw@mail.example.org/?to=a@x.org") == (
        "smtps", "mail.example.org", 465, "u@d", "p/w", ["a@x.org"], None,
    )  # fmt: skip
    for bad, why in (("smtp://mail.example.org/", r"has no \?to="), ("mailto:", "has no address")):
        with pytest.raises(ValueError, match=why):
            notify_email.parse(bad)
    # a password never crosses the network in clear to another machine
    why = notify.send("smtp://u:Pa55@127.0.0.2:9/?to=a@x.org", "t", 1.0)
    assert why is not None and "Pa55" not in why


def test_a_password_is_not_sent_in_clear_to_a_remote_server(monkeypatch):
    smtp = Smtp()
    sent = []

    class NoTls:  # a remote server (by name) that offers no STARTTLS
        def __init__(self, host, port, timeout):
            sent.append((host, port))

        def __enter__(self):
            return self

        def __exit__(self, *a):
            return False

        def ehlo(self):
            pass

        def has_extn(self, name):
            return False

        def login(self, *a):
            raise AssertionError("a login without TLS")

    monkeypatch.setattr(notify_email.smtplib, "SMTP", NoTls)
    why = notify.send(f"smtp://u:Pa55@mail.example.org:{smtp.port}/?to=a@x.org", "t", 1.0)
    assert why is not None and "offers no TLS" in why and "Pa55" not in why


# ---- the outbox and the relay ---------------------------------------------------------------


def test_a_closed_port_then_a_live_server_pending_then_sent_exactly_once(hpc_launch_bin, notify_sandbox, tmp_path):
    work, env, db = notify_sandbox
    port = _free_port()
    env["HPC_LAUNCH_NOTIFY_PAUSES"] = "0.2,0.3"  # the 3 tries, without 7 s of pauses per message
    env["MY_WEBHOOK"] = f"http://127.0.0.1:{port}/hook/T0k3n-s3cr3t-path"
    job = _submit(hpc_launch_bin, work, env, "ok.py", "--notify", "MY_WEBHOOK")  # route auto: 3 tries each
    outbox = work / f"ok.o{job}.notify"

    def both_kept():
        return outbox.exists() and len(notify_outbox.parse(outbox.read_bytes())) == 2

    assert _wait_end(work, "ok", job, until=both_kept) == "0"
    log = (work / f"ok.o{job}").read_text()
    assert log.count("left in the outbox for `hpc-launch status` to send") == 2
    assert oct(outbox.stat().st_mode & 0o777) == "0o600"
    assert b"T0k3n" not in outbox.read_bytes()  # messages, never the URL

    # the webhook is still down: status says so, with the reason, and exits 0
    (got,) = _status(hpc_launch_bin, work, env)
    assert got["job_id"] == job and got["state"] == "done"
    assert got["notify"]["pending"] == 2 and got["notify"]["sent"] == 0
    assert "ConnectionRefusedError" in got["notify"]["why"] and "T0k3n" not in got["notify"]["why"]
    table = run_cli(["status"], env=env).stdout
    assert " notify " in table.splitlines()[0] and "0 sent, 2 pending: the relay's try failed:" in table

    # a relay without the variable keeps them and says what to set
    no_var = {k: v for k, v in env.items() if k != "MY_WEBHOOK"}
    (got,) = _status(hpc_launch_bin, work, no_var)
    assert got["notify"]["pending"] == 2 and "$MY_WEBHOOK is not set where the relay runs" in got["notify"]["why"]

    # the webhook comes up on the same port: two relays at once send each message exactly once
    live = Hook("/hook/T0k3n-s3cr3t-path", port=port)
    relays = [
        subprocess.Popen([hpc_launch_bin, "status", "--json"], env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    for p in relays:
        p.communicate(timeout=120)
    for _ in range(2):  # and later refreshes send nothing again
        _status(hpc_launch_bin, work, env, job)
    texts = live.texts()
    assert sorted(t.rsplit(": ", 1)[1].split(",")[0] for t in texts) == ["done", "started"], texts
    assert len(texts) == 2
    (got,) = _status(hpc_launch_bin, work, env, job)
    assert got["notify"] == {"sent": 2, "pending": 0, "failed": 0, "why": "", "done": True}, got
    assert _status(hpc_launch_bin, work, env) == []  # all out: the ended job leaves `status`
    assert b"T0k3n" not in _everything_written(work, db)
    assert not list(work.glob("*.lock")), "the lock is given back"


def test_the_relay_route_leaves_everything_to_the_relay(hpc_launch_bin, notify_sandbox, tmp_path):
    work, env, _ = notify_sandbox
    hook = Hook("/hook/T0k3n-s3cr3t-path")
    env["MY_WEBHOOK"] = hook.url
    job = _submit(
        hpc_launch_bin, work, env, "fail.py", "--notify", "MY_WEBHOOK", "--profile", _relay_profile(tmp_path, "relay")
    )
    outbox = work / f"fail.o{job}.notify"

    def kept():
        return outbox.exists() and len(notify_outbox.parse(outbox.read_bytes())) == 2

    assert _wait_end(work, "fail", job, until=kept) == "3"
    assert hook.bodies == []  # the job posted nothing itself
    assert "--route relay" in next(work.glob(".hpc-launch/fail-*.sh")).read_text()
    (got,) = _status(hpc_launch_bin, work, env)
    assert got["notify"]["sent"] == 2 and got["notify"]["done"]
    assert len(hook.texts()) == 2 and hook.texts()[1].endswith(f"next: hpc-launch doctor {job}")


def test_the_direct_route_keeps_a_failure_as_failed_not_pending(tmp_path):
    rec = JobRecord("7", "c", "none", "localhost", "t", str(tmp_path), "", "", "", 0.0, state="done")
    entries = [
        notify_outbox.Entry("7.start.1", "start", "H", "s", "s", 1.0, sent=True, relay=False),
        notify_outbox.Entry("7.end.2", "end", "H", "e", "e", 2.0, sent=False, relay=False, why="URLError: timed out"),
    ]
    tally = notify_outbox.tally(entries, set())
    assert (tally.sent, tally.pending, tally.failed, tally.why, tally.ended) == (1, 0, 1, "URLError: timed out", True)
    rec.extra = {notify_relay.KEY: {"via": "H", **tally.as_dict(), "done": True}}
    assert notify_relay.words(rec) == "1 sent, 1 failed: URLError: timed out"
    assert notify_relay.as_json(rec)["failed"] == 1
    assert not notify_relay.wanted(rec)


def test_a_cut_line_in_the_outbox_is_skipped(tmp_path):
    path = tmp_path / "x.o1.notify"
    e = notify_outbox.Entry("1.start.1", "start", "H", "s", "t", 1.0, sent=False, relay=True)
    notify_outbox.append(str(path), e)
    with path.open("a") as fh:
        fh.write('{"id": "1.end.2", "event": "e')  # the job killed mid-write
    assert notify_outbox.parse(path.read_bytes()) == [e]


@pytest.mark.parametrize(("route", "flag"), [("auto", "--route auto"), ("relay", "--route relay")])
def test_the_profile_names_the_route(tmp_path, monkeypatch, route, flag):
    monkeypatch.setenv("MY_WEBHOOK", "https://hooks.example.org/hooks/T0k3n")
    profile = profiles.load("local")
    if route != "auto":
        import msgspec

        profile = msgspec.structs.replace(profile, notify_route=route)
    spec = JobSpec(cluster="local", nodes=1, notify="MY_WEBHOOK", workdir=str(tmp_path), venv="/opt/venv")
    text = render(resolve(spec, profile, cwd=str(tmp_path)), stamp=STAMP).text
    assert flag in text and '--log "$HPC_LAUNCH_LOG"' in text


def test_each_link_and_the_chains_end_have_their_words():
    def end(script, chain, rc=0):
        return notify.message(
            event="end", name="t", job_id="9", cluster="c", host="h", script=script, chain=chain, rc=rc
        )

    assert end("t-1.sh", 2) == "[hpc-launch] t (job 9, c, h): link 1 of 2 done"
    assert end("t-1-link2.sh", 2) == "[hpc-launch] t (job 9, c, h): link 2 of 2 done (the chain's end)"


def test_retries_are_bounded_under_30_s(monkeypatch):
    slept, tries = [], []
    monkeypatch.setattr(notify, "send", lambda url, text, timeout: tries.append(timeout) or "down")
    assert notify.deliver("http://x/", "t", sleep=slept.append) == "down"
    assert len(tries) == notify.TRIES == 3
    assert sum(tries) + sum(slept) < 30


def test_the_start_is_sent_once_the_sites_proxy_is_exported(tmp_path, monkeypatch):
    """Polaris and Aurora: ALCF's proxy for outbound HTTP is in the profile's env, exported after
    the prologue; the start message waits for it (the end, from the EXIT trap, comes later anyway)."""
    monkeypatch.setenv("MY_WEBHOOK", "https://hooks.example.org/hooks/T0k3n")
    spec = JobSpec(cluster="polaris", nodes=1, group="g1", notify="MY_WEBHOOK", workdir=str(tmp_path), venv="/opt/v")
    text = render(resolve(spec, profiles.load("polaris"), cwd=str(tmp_path)), stamp=STAMP).text
    assert text.index("export https_proxy=") < text.index("hpc_launch_notify --event start")


# ---- the relay's own rules, on real files, a real lock and a real webhook --------------------


def _a_job(tmp_path, store, state="done", end_time=None, via="MY_WEBHOOK"):
    from hpc_launch.transport.local import LocalTransport

    script = tmp_path / "t-1.sh"
    script.write_text(f"python -m hpc_launch.notify --url-from {via} --event start\n" if via else "echo\n")
    log = tmp_path / "t.o5"
    rec = JobRecord(
        "5", "local", "none", "localhost", "t", str(tmp_path), str(script), str(log), f"{log}.exitcode", 1.0,
        state=state, end_time=end_time,
    )  # fmt: skip
    store.add(rec)
    return rec, str(log) + ".notify", LocalTransport()


def _entry(event, via="MY_WEBHOOK", sent=False):
    return notify_outbox.Entry(f"5.{event}.1", event, via, event, f"t {event}", 1.0, sent=sent, relay=True)


def test_the_relay_sends_only_to_the_scripts_variable_and_only_under_its_lock(tmp_path):
    import os

    from hpc_launch.records import JobStore

    store = JobStore(tmp_path / "jobs.sqlite")
    hook = Hook("/hook/x")
    rec, outbox, transport = _a_job(tmp_path, store, state="running")
    notify_outbox.append(outbox, _entry("start"))
    notify_outbox.append(outbox, _entry("end", via="OTHER_VAR"))  # not the script's variable: never sent
    env = {"MY_WEBHOOK": hook.url, "OTHER_VAR": hook.url}
    os.mkdir(outbox + ".lock")  # another relay is sending now
    notify_relay.relay(store, [rec], transport, env)
    got = store.get("5", "local").extra[notify_relay.KEY]
    assert (got["pending"], got["why"], hook.bodies) == (1, "another hpc-launch is sending them now", [])
    old = time.time() - 600
    os.utime(outbox + ".lock", (old, old))  # ... and died holding it: taken over
    notify_relay.relay(store, [store.get("5", "local")], transport, env)
    assert hook.texts() == ["t start"]
    got = store.get("5", "local").extra[notify_relay.KEY]
    assert (got["sent"], got["pending"], got["done"]) == (1, 0, False)  # no end message yet
    assert not os.path.exists(outbox + ".lock")


def test_messages_another_relay_sent_while_it_still_holds_the_lock_are_simply_sent(tmp_path):
    """Three `status` at once (CI): one relay sent both messages and had not yet let go of the
    lock when another looked; that one must count them sent, not leave "sending them now" on a job
    whose notifications are done (a done job is not looked at again)."""
    import os

    from hpc_launch.records import JobStore

    store = JobStore(tmp_path / "jobs.sqlite")
    rec, outbox, transport = _a_job(tmp_path, store, end_time=time.time())
    for event in ("start", "end"):
        notify_outbox.append(outbox, _entry(event))
    store.update("local", "5", extra={notify_relay.KEY: {"via": "MY_WEBHOOK", "pending": 2}})  # as a job ends
    os.mkdir(outbox + ".lock")  # the other relay holds the lock ...
    sent = tmp_path / (os.path.basename(outbox) + ".sent")

    class Racing(type(transport)):
        def run(self, argv, **kw):
            if argv[:1] == ["mkdir"]:  # ... and writes what it sent just before this relay tries the lock
                sent.write_text(notify_outbox.sent_text(["5.start.1", "5.end.1"]))
            return super().run(argv, **kw)

    notify_relay.relay(store, [store.get("5", "local")], Racing(), {"MY_WEBHOOK": "http://127.0.0.1:9/never"})
    got = store.get("5", "local").extra[notify_relay.KEY]
    assert (got["sent"], got["pending"], got["why"], got["done"]) == (2, 0, "", True)


def test_an_end_that_never_came_is_said_and_then_no_longer_looked_for(tmp_path):
    from hpc_launch.records import JobStore

    store = JobStore(tmp_path / "jobs.sqlite")
    rec, outbox, transport = _a_job(tmp_path, store, end_time=time.time() - 3600)
    notify_outbox.append(outbox, _entry("start", sent=True))
    rec.extra = {notify_relay.KEY: {"via": "MY_WEBHOOK"}}
    store.update("local", "5", extra=rec.extra)
    notify_relay.relay(store, [store.get("5", "local")], transport, {})
    after = store.get("5", "local")
    assert notify_relay.words(after) == (
        "1 sent: the job ended without sending its end message (killed before its exit trap ran)"
    )
    assert not notify_relay.wanted(after)


def test_a_job_without_notify_is_looked_at_once(tmp_path):
    from hpc_launch.records import JobStore

    store = JobStore(tmp_path / "jobs.sqlite")
    rec, _, transport = _a_job(tmp_path, store, state="running", via="")
    assert notify_relay.wanted(rec)
    notify_relay.relay(store, [rec], transport, {})
    after = store.get("5", "local")
    assert after.extra == {notify_relay.KEY: {"via": ""}} and not notify_relay.wanted(after)
    assert notify_relay.words(after) == "" and notify_relay.as_json(after) is None


def test_a_follower_relays_at_each_change_and_every_30_s(tmp_path, monkeypatch):
    """`logs -f`'s state poller is a relay too: at each state change and every RELAY_EVERY_S."""
    from hpc_launch.jobs import state as state_mod
    from hpc_launch.records import JobStore
    from hpc_launch.states import JobState

    store = JobStore(tmp_path / "jobs.sqlite")
    rec, _, transport = _a_job(tmp_path, store, state="queued")
    said = iter([JobState.QUEUED, JobState.RUNNING, JobState.RUNNING, JobState.RUNNING, JobState.DONE])
    monkeypatch.setattr(state_mod, "query", lambda t, recs: {"5": state_mod.Outcome(next(said))})
    relayed, clock = [], [1000.0]
    monkeypatch.setattr(state_mod.notify_relay, "relay", lambda store, recs, t: relayed.append(clock[0]))
    monkeypatch.setattr(state_mod.time, "monotonic", lambda: clock[0])
    poll = state_mod.state_poller(transport, rec, store)
    for step in (0, 1, 5, 31, 1):  # queued (first look), running (a change), 5 s, 31 s later, done
        clock[0] += step
        poll()
    assert relayed == [1000.0, 1001.0, 1037.0, 1038.0]
