"""--notify: word when a job starts and ends, sent by the job itself (the laptop that submitted may
be off), to a webhook: Slack/Mattermost-compatible JSON (`{"text": "..."}`), or ntfy's plain
text body.

The URL is a secret (anyone holding it can post): it reaches the job as a --pass-env variable
(hpc_launch/secrets.py), and this module reads it from the environment by the variable's NAME,
the only thing on its command line. It is never printed: a failure is one line in the log, with
the URL and its parts masked. Nothing here can fail or hold up the job for long: one POST with a
10 s timeout, and exit 0 whatever happens. What the job printed (an error line could hold a
secret) is never sent: only the event, the exit code and the next step.

Run by the job script's prologue and EXIT trap (templates/body/prologue.sh.j2):
    python -m hpc_launch.notify --url-from NAME --event start|end [--rc N] ...
No imports beyond the standard library: this runs inside jobs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import sys
import time
import urllib.parse
import urllib.request
from typing import List, Optional, Tuple

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


def mask(text: str, url: str) -> str:
    """`text` with the URL and every part of it that could identify it replaced."""
    parts = urllib.parse.urlsplit(url[len("ntfy+") :] if url.startswith("ntfy+") else url)
    secrets: List[str] = [url, parts.geturl(), parts.netloc, parts.path, parts.query]
    secrets += [p for p in parts.path.split("/") if len(p) >= 4]
    for s in sorted({s for s in secrets if s and s != "/"}, key=len, reverse=True):
        text = text.replace(s, "***")
    return text


def send(url: str, text: str, timeout: float = TIMEOUT_S) -> Optional[str]:
    """POST the message; None when it went, else why not (masked)."""
    try:
        target, body, ctype = payload(url, text)
        if urllib.parse.urlsplit(target).scheme not in ("http", "https"):
            return "the value is not an http(s) URL"
        req = urllib.request.Request(target, data=body, method="POST", headers={"Content-Type": ctype})
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            resp.read(1024)
        return None
    except Exception as exc:  # noqa: BLE001 - a notification never fails the job, whatever went wrong
        return mask(f"{type(exc).__name__}: {exc}", url)


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
    try:
        a = p.parse_args(argv)
        url = os.environ.get(a.url_from, "")
        if not url:
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
        why = send(url, text)
        if why:
            print(
                f"[hpc-launch] notify: the webhook in {a.url_from} did not take the {a.event} message ({why})",
                file=sys.stderr,
            )
    except SystemExit:  # argparse's own message is already printed
        pass
    except Exception as exc:  # noqa: BLE001
        print(f"[hpc-launch] notify: no message sent ({type(exc).__name__})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
