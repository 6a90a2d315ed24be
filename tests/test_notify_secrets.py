"""--notify and what must never leave the job (issue 28, "Secrets and faults"): a URL's credentials
in every shape, refused control characters, --pass-env values in doctor's cause, hpc-launch's own
notify lines read as the program's, a relay killed mid-POST. Real parts: real HTTP and SMTP servers
on 127.0.0.1, the real outbox, the real job store, real processes."""

from __future__ import annotations

import base64
import http.server
import json
import os
import signal
import socketserver
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import List

import pytest

from hpc_launch import notify
from hpc_launch.site import profiles
from hpc_launch.notify import outbox as notify_outbox, relay as notify_relay
from hpc_launch.errors import SpecError
from hpc_launch.records import JobStore
from hpc_launch.spec import JobSpec, resolve
from test_notify_relay import _a_job, _entry, _free_port


class RefusingSmtp:
    """A real SMTP server that refuses every login, echoing the credentials it got (some do)."""

    def __init__(self) -> None:
        class Handler(socketserver.StreamRequestHandler):
            def handle(self):
                def say(line: str) -> None:
                    self.wfile.write(line.encode() + b"\r\n")

                say("220 test.local ESMTP")
                while True:
                    raw = self.rfile.readline()
                    if not raw:
                        return
                    verb = raw.decode().strip().split(" ", 1)[0].upper()
                    if verb in ("EHLO", "HELO"):
                        say("250-test.local")
                        say("250 AUTH PLAIN")
                    elif verb == "AUTH":
                        got = base64.b64decode(raw.split()[2]).replace(b"\0", b" ").decode()
                        say(f"535 5.7.8 authentication failed for{got}")
                    else:
                        say("221 bye")
                        return

        class Server(socketserver.ThreadingTCPServer):
            allow_reuse_address = True
            daemon_threads = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


_SMTP = RefusingSmtp()
_CLOSED = _free_port()

# (URL, the password's pieces that must appear nowhere): every shape a user may write
SHAPES = [
    (f"https://alice:Pw7kq2Zx@127.0.0.1:{_CLOSED}/hooks/x", ["Pw7kq2Zx"]),
    (f"http://alice:Qx7/Zr9m@127.0.0.1:{_CLOSED}/hooks/x", ["Qx7", "Zr9m"]),
    (f"http://alice:Qx7#Zr9m@127.0.0.1:{_CLOSED}/hooks/x", ["Qx7", "Zr9m"]),
    (f"http://alice:Qx7?Zr9m@127.0.0.1:{_CLOSED}/hooks/x", ["Qx7", "Zr9m"]),
    (f"http://alice:Qx7 Zr9m@127.0.0.1:{_CLOSED}/hooks/x", ["Qx7", "Zr9m"]),
    ("https://alice:Pw7kq2Zx@nowhere.invalid/hooks/x", ["Pw7kq2Zx"]),
    (f"http://alice:Qx7%2FZr9m%40@127.0.0.1:{_CLOSED}/hooks/x", ["Qx7", "Zr9m"]),
    (f"smtp://alice:Qx7/Zr9m@127.0.0.1:{_SMTP.port}/?to=a@x.org", ["Qx7", "Zr9m"]),
    (f"smtp://alice:Pw7kq2Zx@127.0.0.1:{_SMTP.port}/?to=a@x.org", ["Pw7kq2Zx"]),
    (f"smtp://alice:Pw%2F7kq@127.0.0.1:{_SMTP.port}/?to=a@x.org", ["Pw/7kq", "Pw%2F7kq"]),
]


# ids without the ports: every xdist worker must collect the same test names
_IDS = [f"shape{i}" for i in range(len(SHAPES))]


@pytest.mark.parametrize(("url", "pieces"), SHAPES, ids=_IDS)
def test_a_failed_send_masks_the_credentials_in_the_log_and_the_outbox(url, pieces, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(notify.PAUSES_ENV, "0,0")
    monkeypatch.setenv("MY_WEBHOOK", url)
    log = tmp_path / "t.o5"
    assert notify.main(["--url-from", "MY_WEBHOOK", "--event", "end", "--rc", "1", "--log", str(log)]) == 0
    said = capsys.readouterr().err  # the job's log gets this line
    assert "did not take the end message" in said
    (entry,) = notify_outbox.parse(Path(notify_outbox.outbox_path_for(str(log))).read_bytes())
    assert entry.why and not entry.sent
    for piece in pieces:
        assert piece not in said and piece not in entry.why, (url, said)
        assert piece not in Path(notify_outbox.outbox_path_for(str(log))).read_text()


@pytest.mark.parametrize(("url", "pieces"), SHAPES[:2] + SHAPES[-3:], ids=_IDS[:2] + _IDS[-3:])
def test_the_relays_failure_in_the_job_store_is_masked(url, pieces, tmp_path):
    store = JobStore(tmp_path / "jobs.sqlite")
    rec, outbox, transport = _a_job(tmp_path, store, state="running")
    notify_outbox.append(outbox, _entry("start"))
    notify_relay.relay(store, [rec], transport, {"MY_WEBHOOK": url})
    got = store.get("5", "local")
    assert got.extra[notify_relay.KEY]["pending"] == 1 and "the relay's try failed" in notify_relay.words(got)
    stored = b"".join(p.read_bytes() for p in tmp_path.glob("jobs.sqlite*"))
    for piece in pieces:
        assert piece.encode() not in stored and piece not in notify_relay.words(got)


@pytest.mark.parametrize("bad", ["\r", "\n", "\t", "\x1b", "\x7f", "\u0085", "\u2028"])
def test_a_url_with_a_control_character_is_refused_at_submit_without_its_value(bad, tmp_path, monkeypatch):
    monkeypatch.setenv("MY_WEBHOOK", f"https://hooks.example.org/T0k3n{bad}X-Injected: 1")
    spec = JobSpec(cluster="local", nodes=1, notify="MY_WEBHOOK", workdir=str(tmp_path), venv="/opt/venv")
    with pytest.raises(SpecError) as err:
        resolve(spec, profiles.load("local"), cwd=str(tmp_path))
    assert "--notify MY_WEBHOOK: its value holds a control character" in str(err.value)
    assert "T0k3n" not in str(err.value) + str(err.value.hint)
    assert list(tmp_path.iterdir()) == []


def test_a_url_without_credentials_leaves_the_messages_words_alone():
    url = "https://hooks.example.org/hooks/T0k3nPath?mail=a@b.org&from=hpc@x.org"
    text = "hpc-launch: a node on x failed at hooks.example.org/hooks/T0k3nPath"
    assert notify.mask(text, url) == "hpc-launch: a node on x failed at ***"
    assert notify.mask("user u, pw p: a b", "smtp://u:p@127.0.0.1/?to=a@b.org") == "user ***, pw ***: a b"


# ---- a --pass-env value in the failing program's words never reaches the webhook -------------


def test_a_pass_env_value_in_the_exception_is_masked_in_doctors_cause(hpc_launch_bin, notify_sandbox):
    from test_notify import Hook, _submit, _wait_end

    work, env, _ = notify_sandbox
    hook = Hook("/hook/x")
    env.update(MY_WEBHOOK=hook.url, API_TOKEN="tok-9f8e7d6c5b", SHORT_PW="k9")
    (work / "leak.py").write_text(
        "import os\n"
        "raise RuntimeError(f\"The client socket has failed to connect to (db-{os.environ['API_TOKEN']}.lab, 29500) "
        "as {os.environ['SHORT_PW']}\")\n"
    )
    job = _submit(
        hpc_launch_bin,
        work,
        env,
        "leak.py",
        "--notify",
        "MY_WEBHOOK",
        "--pass-env",
        "API_TOKEN",
        "--pass-env",
        "SHORT_PW",
    )
    assert _wait_end(work, "leak", job, until=lambda: len(hook.bodies) >= 2) != "0"
    end = hook.texts()[1]
    assert "cause: a rank could not reach the rendezvous" in end, end  # doctor's cause is there ...
    assert "tok-9f8e7d6c5b" not in end and "(db-***.lab:29500)" in end  # ... without the value
    assert "tok-9f8e7d6c5b" in (work / f"leak.o{job}").read_text()  # (the program did print it)


def test_every_form_of_a_value_is_masked_in_a_cause_line():
    value = 'multi-part\nline\'s "v" \u00e9'
    line = f'cause: {value!r} and {json.dumps(value)} and line\'s "v" \u00e9 and k9 but not k99 nor multi'
    got = notify.masked_cause([line], "http://h.example.org/x", [value, "k9"])
    assert got == ["cause: '***' and \"***\" and *** and *** but not k99 nor multi"], got


# ---- hpc-launch's own notify lines are not the program's words --------------------------------


def test_an_unreachable_webhook_is_not_read_as_the_rendezvous_network(tmp_path, monkeypatch, capsys):
    from hpc_launch import doctor

    monkeypatch.setenv(notify.PAUSES_ENV, "0,0")
    monkeypatch.setenv("MY_WEBHOOK", f"http://127.0.0.1:{_CLOSED}/hook")
    notify.main(["--url-from", "MY_WEBHOOK", "--event", "start", "--log", str(tmp_path / "t.o5")])
    said = capsys.readouterr().err  # the line the job's log gets, as notify wrote it
    assert "Connection refused" in said
    log = f"[hpc-launch] job 5 on n1\n{said}Traceback (most recent call last):\nValueError: bad config\n"
    d = doctor.diagnose(log, exit_code=1, state="failed")
    assert not any(f.cause.key == "rendezvous" for f in d.findings), doctor.report_lines(d)
    assert "notify" not in "\n".join(doctor.report_lines(d))  # nor shown as the evidence of an unknown failure
    # the program's own refused connection still is
    refused = (
        "[W socket.cpp:697] [c10d] The client socket has failed to connect to [n1]:29500 "
        "(errno: 111 - Connection refused)."
    )
    log = f"[hpc-launch] job 5 on n1\n{said}{refused}\n"
    d = doctor.diagnose(log, exit_code=1, state="failed")
    assert [(f.cause.key, f.line_no) for f in d.findings if f.cause.key == "rendezvous"] == [("rendezvous", 3)]


# ---- a relay that dies holding the outbox's lock ---------------------------------------------


class SlowHook:
    """A real webhook on 127.0.0.1 that holds each POST until `release` is set (a slow server)."""

    def __init__(self) -> None:
        self.bodies: List[bytes] = []
        self.release = threading.Event()
        hook = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                hook.bodies.append(self.rfile.read(int(self.headers["Content-Length"])))
                hook.release.wait(30)
                self.send_response(200)
                self.end_headers()

            def log_message(self, *_a):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def _relay_process(tmp_path: Path, url: str, as_seen: str = "") -> subprocess.Popen:
    """A real relay process (what `status` runs), on the job as the store holds it, or as a refresh
    saw it before it stored the job's end (`as_seen`: the state then)."""
    code = (
        "import sys\nfrom hpc_launch.notify import relay as notify_relay\nfrom hpc_launch.records import JobStore\n"
        "from hpc_launch.transport.local import LocalTransport\n"
        f"s = JobStore({str(tmp_path / 'jobs.sqlite')!r})\n"
        "rec = s.get('5', 'local')\n"
        + (f"rec.state = {as_seen!r}\n" if as_seen else "")
        + f"notify_relay.relay(s, [rec], LocalTransport(), {{'MY_WEBHOOK': {url!r}}})\n"
    )
    return subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.DEVNULL)


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGINT])
def test_a_relay_killed_mid_post_leaves_its_messages_to_the_next_one(how, tmp_path):
    store = JobStore(tmp_path / "jobs.sqlite")
    rec, outbox, transport = _a_job(tmp_path, store, end_time=time.time())
    for event in ("start", "end"):
        notify_outbox.append(outbox, _entry(event))
    store.update("local", "5", extra={notify_relay.KEY: {"via": "MY_WEBHOOK", "pending": 2}})  # as the job left it
    hook = SlowHook()
    relay = _relay_process(tmp_path, hook.url)
    deadline = time.monotonic() + 30
    while not hook.bodies:  # the webhook holds the relay's first POST ...
        assert relay.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    relay.send_signal(how)  # ... when it dies (kill -9) or is stopped (Ctrl-C)
    relay.wait(30)
    hook.release.set()
    notify_relay.relay(store, [store.get("5", "local")], transport, {"MY_WEBHOOK": hook.url})  # the next `status`
    after = store.get("5", "local")
    assert notify_relay.words(after) == "2 sent", after.extra
    assert sorted(json.loads(b)["text"] for b in hook.bodies[1:]) == ["t end", "t start"]
    assert not os.path.exists(outbox + ".lock")


def test_a_lock_held_by_a_live_relay_is_left_to_it(tmp_path):
    store = JobStore(tmp_path / "jobs.sqlite")
    rec, outbox, transport = _a_job(tmp_path, store, end_time=time.time())
    notify_outbox.append(outbox, _entry("end"))
    store.update("local", "5", extra={notify_relay.KEY: {"via": "MY_WEBHOOK", "pending": 1}})
    hook = SlowHook()
    relay = _relay_process(tmp_path, hook.url)
    try:
        while not hook.bodies:
            assert relay.poll() is None
            time.sleep(0.02)
        notify_relay.relay(store, [store.get("5", "local")], transport, {"MY_WEBHOOK": hook.url})
        assert (
            notify_relay.words(store.get("5", "local")) == "0 sent, 1 pending: another hpc-launch is sending them now"
        )
        assert len(hook.bodies) == 1
    finally:
        hook.release.set()
        relay.wait(30)
    notify_relay.relay(store, [store.get("5", "local")], transport, {"MY_WEBHOOK": hook.url})
    assert notify_relay.words(store.get("5", "local")) == "1 sent" and len(hook.bodies) == 1


def test_a_message_never_sent_is_given_up_with_its_reason_a_day_after_the_job_ended(tmp_path):
    store = JobStore(tmp_path / "jobs.sqlite")
    rec, outbox, transport = _a_job(tmp_path, store, end_time=time.time() - notify_relay.GIVE_UP_S - 60)
    notify_outbox.append(outbox, _entry("end"))
    store.update("local", "5", extra={notify_relay.KEY: {"via": "MY_WEBHOOK", "pending": 1}})
    url = f"http://127.0.0.1:{_CLOSED}/hook"
    notify_relay.relay(store, [store.get("5", "local")], transport, {"MY_WEBHOOK": url})
    after = store.get("5", "local")
    assert notify_relay.words(after).startswith(
        "0 sent, 1 failed: given up a day after the job ended; the last try: the relay's try failed: "
        "ConnectionRefusedError"
    )
    assert not notify_relay.wanted(after)


def test_a_real_job_with_a_password_in_its_mail_url_writes_it_nowhere(hpc_launch_bin, notify_sandbox):
    """End to end: a real `local` job whose --notify is an smtp:// URL with a password holding a
    `/`, to a server that refuses the login and echoes it; then `status` relays and fails again."""
    from test_notify import _everything_written, _submit, _wait_end
    from test_notify_relay import _status

    work, env, db = notify_sandbox
    env[notify.PAUSES_ENV] = "0,0"
    env["MY_MAIL"] = f"smtp://alice:Qx7k/Zr9m@127.0.0.1:{_SMTP.port}/?to=a@x.org"
    job = _submit(hpc_launch_bin, work, env, "fail.py", "--notify", "MY_MAIL")
    outbox = work / f"fail.o{job}.notify"
    assert _wait_end(work, "fail", job, until=lambda: outbox.exists() and outbox.read_text().count("\n") >= 2) == "3"
    (got,) = _status(hpc_launch_bin, work, env)
    assert got["notify"]["pending"] == 2 and "the relay's try failed" in got["notify"]["why"], got["notify"]
    log = (work / f"fail.o{job}").read_text()
    assert log.count("did not take the") == 2
    written = _everything_written(work, db)
    for piece in (b"Qx7k", b"Zr9m"):
        assert piece not in written, piece


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGINT])
def test_a_job_whose_first_relay_dies_mid_post_is_still_owed_its_messages(how, tmp_path):
    """`status` stores the job's end, then relays for the first time (no notify state yet) and is
    killed while the webhook holds the POST: the job must stay owed (before: an ended job never
    looked at is not chased, so `status` dropped it and the messages were lost silently)."""
    store = JobStore(tmp_path / "jobs.sqlite")
    rec, outbox, transport = _a_job(tmp_path, store, end_time=time.time())  # ended, stored so
    for event in ("start", "end"):
        notify_outbox.append(outbox, _entry(event))
    hook = SlowHook()
    relay = _relay_process(tmp_path, hook.url, as_seen="running")  # the refresh saw it running
    deadline = time.monotonic() + 30
    while not hook.bodies:
        assert relay.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    relay.send_signal(how)
    relay.wait(30)
    hook.release.set()
    after = store.get("5", "local")
    assert notify_relay.wanted(after), after.extra  # `status` still lists it ...
    notify_relay.relay(store, [after], transport, {"MY_WEBHOOK": hook.url})
    assert notify_relay.words(store.get("5", "local")) == "2 sent"  # ... and its next relay sends both
