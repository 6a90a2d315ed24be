"""--notify: word when a job starts and ends, sent to a webhook (Slack/Mattermost-compatible JSON
`{"text": "..."}`, or ntfy's plain text body) or by e-mail (notify/mail.py); a failure carries
doctor's cause and fix (notify/cause.py).

The URL (or mail address form) is a secret (anyone holding it can post): it reaches the job as a
--pass-env variable (hpc_launch/secrets.py), and this module reads it from the environment by the
variable's NAME, the only thing on its command line. It is never printed: a failure is one line in
the log, with the URL and its parts masked. What the job printed (an error line could hold a
secret) is never sent: only the event, the exit code, doctor's cause and fix, and the next step.

Where it is sent from (the profile's `notify_route`, docs/commands.md#notify):
  direct  the job posts (3 tries in under 30 s); a failure is kept in the outbox as failed
  relay   the job only writes the outbox; whoever refreshes the job (`status`, `list -r`,
          `logs -f`, on the login node or the laptop) sends it (notify/relay.py)
  auto    direct, and what did not go is left in the outbox for the relay (the default)
Every message is written to the outbox beside the log (notify/outbox.py), sent or not, so
`status` can say what went and what waits, and why.

Run by the job script's prologue and EXIT trap (templates/body/prologue.sh.j2):
    python -m hpc_launch.notify --url-from NAME --event start|end [--rc N] --log LOG --route R ...
No imports beyond the standard library and the package's own standard-library modules: this runs
inside jobs, and nothing here can fail the job.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Callable, Iterable, List, Mapping, Optional, Tuple

from . import mail as notify_email, outbox as notify_outbox  # the package's own, standard library only

TIMEOUT_S = 10.0
EXIT_RESUMABLE = 75  # hpc_launch/protocol.py, repeated so this module imports nothing of the package
EXIT_HANG = 124
EXIT_SIGINT = 130
EXIT_SIGKILL = 137
EXIT_SIGTERM = 143
_LINK = re.compile(r"-link(\d+)\.sh$")  # protocol.link_script_name: link 1 is NAME.sh, link N NAME-linkN.sh


def link_of(script_name: str) -> int:
    m = _LINK.search(script_name or "")
    return int(m.group(1)) if m else 1


def _duration(seconds: float) -> str:
    s = max(0, int(seconds))
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else (f"{m}m{s:02d}s" if m else f"{s}s")


def outcome(rc: int, deadline: Optional[float], now: float) -> str:
    """What an exit code means, in the words of the message."""
    if rc == 0:
        return "done"
    if rc == EXIT_RESUMABLE:
        return "ended: resumable (stopped at a checkpoint before its time ran out)"
    if rc in (EXIT_SIGTERM, EXIT_SIGINT, EXIT_SIGKILL):
        # a scheduler ends a job at its walltime with the same signal as a cancel: past the
        # deadline the job set itself, it is the walltime
        if deadline is not None and now >= deadline:
            return f"timeout (exit code {rc})"
        return f"cancelled (exit code {rc})"
    if rc == EXIT_HANG:
        return f"failed: hung, ended by the watchdog (exit code {rc})"
    return f"failed with exit code {rc}"


def message(
    *,
    event: str,
    name: str,
    job_id: str,
    cluster: str,
    host: str,
    script: str = "",
    chain: int = 1,
    rc: Optional[int] = None,
    elapsed_s: Optional[float] = None,
    deadline: Optional[float] = None,
    now: Optional[float] = None,
) -> str:
    link = link_of(script)
    where = f"link {link} of {chain}" if chain > 1 else ""
    if event == "start":
        what = f"{where} started" if where else "started"
    else:
        assert rc is not None
        said = outcome(rc, deadline, time.time() if now is None else now)
        what = f"{where} {said}" if where else said
        if chain > 1 and link == chain:
            what += " (the chain's end)"
        if elapsed_s is not None:
            what += f", after {_duration(elapsed_s)}"
        if said.startswith(("failed", "timeout")):  # a cancel is what someone asked for
            what += f"; next: hpc-launch doctor {job_id}"
    return f"[hpc-launch] {name} (job {job_id}, {cluster}, {host}): {what}"


def payload(url: str, text: str) -> Tuple[str, bytes, str]:
    """(url to post to, body, content type): ntfy takes the text as the body; everything else
    (Slack, Mattermost, Rocket.Chat, Discord's /slack endpoint) a JSON {"text": ...}."""
    if url.startswith("ntfy+"):
        return url[len("ntfy+") :], text.encode(), "text/plain; charset=utf-8"
    host = urllib.parse.urlsplit(url).hostname or ""
    if host.startswith("ntfy."):
        return url, text.encode(), "text/plain; charset=utf-8"
    return url, json.dumps({"text": text}).encode(), "application/json"


# where a URL's parts split: a password may hold any of them, and an error may show any piece
_URL_SEPARATORS = re.compile(r"[:/@?#&=;,\s]+")


def url_secrets(url: str) -> List[str]:
    """Every part of `url` that could give it away, however it is written: the whole, what follows
    its scheme, the user and password (before an `@`: a password may hold `/`, `#`, `?` or `@`),
    what urlsplit makes of it (a library's error quotes those: `nonnumeric port: 'pa'`),
    the path's and query's pieces, each also percent-decoded. The user's and password's pieces
    count whatever their length; other pieces from 4 characters on."""
    bare = url[len("ntfy+") :] if url.startswith("ntfy+") else url
    rest = re.sub(r"^[A-Za-z][A-Za-z0-9+.-]*:(//)?", "", bare)
    # before which `@` the credentials end is a guess when a password holds one: each is taken, but
    # one that went into the query (`?to=a@b`) is not a password, and a short piece of it is a word
    ats = [i for i, c in enumerate(rest) if c == "@"]
    userinfos = [rest[:i] for i in ats if "=" not in rest[:i].partition("?")[2]]
    parts = urllib.parse.urlsplit(bare)
    credentials = [parts.username or "", parts.password or ""]
    for userinfo in userinfos:
        credentials += [userinfo, *userinfo.split(":", 1)]
    credentials += [p for c in list(credentials) for p in _URL_SEPARATORS.split(c)]
    whole = [url, bare, rest, parts.netloc, parts.path, parts.query, parts.fragment, parts.hostname or ""]
    whole += [p for w in list(whole) for p in _URL_SEPARATORS.split(w) if len(p) >= 4]
    found = credentials + whole
    found += [urllib.parse.unquote(s) for s in found] + [urllib.parse.unquote_plus(s) for s in found]
    return [s for s in dict.fromkeys(found) if s and s != "/"]


def mask(text: str, url: str) -> str:
    """`text` with the URL and every part of it that could identify it or its credentials replaced."""
    from .. import secrets  # the package's own, standard library only

    return secrets.masked(text, url_secrets(url))


def send(url: str, text: str, timeout: float = TIMEOUT_S) -> Optional[str]:
    """Send the message once: POST it to a webhook, or mail it (notify/mail.py). None when it
    went, else why not (masked)."""
    try:
        if notify_email.is_mail(url):
            notify_email.send(url, text.split("\n", 1)[0], text, timeout)
            return None
        target, body, ctype = payload(url, text)
        if urllib.parse.urlsplit(target).scheme not in ("http", "https"):
            return "the value is not an http(s) URL nor a mail address form (mailto:, smtp://, smtps://)"
        req = urllib.request.Request(target, data=body, method="POST", headers={"Content-Type": ctype})
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            resp.read(1024)
        return None
    except Exception as exc:  # noqa: BLE001 - a notification never fails the job, whatever went wrong
        if isinstance(exc, urllib.error.URLError) and isinstance(exc.reason, Exception):
            exc = exc.reason  # the socket's own error: ConnectionRefusedError, not `<urlopen error ...>`
        return mask(f"{type(exc).__name__}: {exc}", url)


TRIES = 3
PAUSES_S = (2.0, 5.0)  # between tries: with TRY_TIMEOUT_S, at most 3 x 6 + 7 = 25 s in all
PAUSES_ENV = "HPC_LAUNCH_NOTIFY_PAUSES"  # "2,5": the pauses in seconds (each at most 10); tests shorten them
TRY_TIMEOUT_S = 6.0
ROUTES = ("auto", "direct", "relay")


def pauses(env: Mapping[str, str] = os.environ) -> tuple:
    """The pauses between tries: $HPC_LAUNCH_NOTIFY_PAUSES when it is two numbers of 0-10 s, else
    PAUSES_S (a bad value never fails the job nor stretches it past its 30 s)."""
    try:
        got = tuple(float(x) for x in env.get(PAUSES_ENV, "").split(","))
    except ValueError:
        return PAUSES_S
    return got if len(got) == TRIES - 1 and all(0 <= x <= 10 for x in got) else PAUSES_S


def deliver(url: str, text: str, sleep: Callable[[float], None] = time.sleep) -> Optional[str]:
    """Up to TRIES sends with pauses, under 30 s in all; None when one went, else the last reason."""
    why: Optional[str] = None
    between = pauses()
    for attempt in range(TRIES):
        if attempt:
            sleep(between[attempt - 1])
        why = send(url, text, TRY_TIMEOUT_S)
        if why is None:
            return None
    return why


def masked_cause(lines: List[str], url: str, values: Iterable[str]) -> List[str]:
    """Doctor's lines, read from the job's log, with the URL and every --pass-env value masked
    (in every form a program prints it): a program's error may quote either, and this goes out."""
    from .. import secrets  # the package's own, standard library only

    hidden = url_secrets(url) if url else []
    hidden += [form for value in values for form in secrets.value_forms(value)]
    return [secrets.masked(line, hidden) for line in lines]


def with_cause(text: str, log: str, rc: int, url: str = "", values: Iterable[str] = ()) -> str:
    """A failure's message with doctor's cause and fix below its first line (notify/cause.py),
    masked: nothing read from the log leaves the job as it was written."""
    from . import cause as notify_cause  # the package's own, standard library only

    lines = masked_cause(notify_cause.cause_lines(log, rc), url, values)
    return "\n".join([text, *lines]) if lines else text


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hpc_launch.notify")
    p.add_argument("--url-from", required=True, metavar="NAME", help="the variable that holds the webhook URL")
    p.add_argument("--event", required=True, choices=("start", "end"))
    p.add_argument("--rc", type=int)
    p.add_argument("--name", default="job")
    p.add_argument("--job-id", default="?")
    p.add_argument("--cluster", default="?")
    p.add_argument("--script", default="")
    p.add_argument("--chain", type=int, default=1)
    p.add_argument("--since", default="", help="the start, in seconds since the epoch")
    p.add_argument("--deadline", default="", help="HPC_LAUNCH_DEADLINE")
    p.add_argument("--log", default="", help="the job's log: doctor reads it, the outbox lies beside it")
    p.add_argument("--route", default="auto", choices=ROUTES)
    p.add_argument("--mask-from", default="", metavar="NAMES", help="the --pass-env variables, comma-separated")
    try:
        a = p.parse_args(argv)
        url = os.environ.get(a.url_from, "")
        if not url and a.route != "relay":
            print(f"[hpc-launch] notify: {a.url_from} is not set in the job: no message sent", file=sys.stderr)
            return 0
        now = time.time()
        since = float(a.since) if a.since.strip() else None
        deadline = float(a.deadline) if a.deadline.strip() else None
        text = message(
            event=a.event,
            name=a.name,
            job_id=a.job_id,
            cluster=a.cluster,
            host=socket.gethostname(),
            script=a.script,
            chain=a.chain,
            rc=a.rc if a.event == "end" else None,
            elapsed_s=now - since if since is not None and a.event == "end" else None,
            deadline=deadline,
            now=now,
        )
        if a.event == "end" and a.log and text.endswith(f"next: hpc-launch doctor {a.job_id}"):
            values = [os.environ.get(n, "") for n in a.mask_from.split(",") if n]
            text = with_cause(text, a.log, a.rc if a.rc is not None else 1, url, values)
        why = None if a.route == "relay" else deliver(url, text)
        sent = a.route != "relay" and why is None
        if a.log:
            _keep(a, text, sent=sent, why=why or "", now=now)
        if why:
            then = "; left in the outbox for `hpc-launch status` to send" if a.route == "auto" and a.log else ""
            print(
                f"[hpc-launch] notify: the {'mail address' if notify_email.is_mail(url) else 'webhook'} in "
                f"{a.url_from} did not take the {a.event} message ({why}){then}",
                file=sys.stderr,
            )
    except SystemExit:  # argparse's own message is already printed
        pass
    except Exception as exc:  # noqa: BLE001
        print(f"[hpc-launch] notify: no message sent ({type(exc).__name__})", file=sys.stderr)
    return 0


def _keep(a: argparse.Namespace, text: str, *, sent: bool, why: str, now: float) -> None:
    """The message in the outbox: the relay sends it if it is not sent, `status` counts it either way."""
    entry = notify_outbox.Entry(
        id=f"{a.job_id}.{a.event}.{time.time_ns()}",  # a requeued job starts again under the same id
        event=a.event,
        via=a.url_from,
        subject=text.split("\n", 1)[0],
        text=text,
        at=now,
        sent=sent,
        relay=a.route != "direct",
        why=why,
    )
    try:
        notify_outbox.append(notify_outbox.outbox_path_for(a.log), entry)
    except OSError as exc:
        print(f"[hpc-launch] notify: the outbox beside the log cannot be written ({exc.strerror})", file=sys.stderr)
