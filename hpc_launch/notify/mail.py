"""--notify by e-mail: the variable holds an address form instead of a webhook URL.

    mailto:ADDR[,ADDR...][?from=ADDR]                 the machine's own mail server (localhost:25)
    smtp://[USER[:PASSWORD]@]HOST[:PORT]/?to=ADDR[,ADDR...][&from=ADDR]
                                                      that server (port 25 by default); STARTTLS when it
                                                      offers it, and a login only over TLS or to this machine
    smtps://...                                       the same over TLS from the first byte (port 465)

USER and PASSWORD are percent-encoded (`@` as %40). The whole value is the secret: it travels as a
--pass-env variable like a webhook URL and is never printed (notify.mask). Standard library only:
this runs inside jobs.
"""

from __future__ import annotations

import smtplib
import socket
import ssl
import urllib.parse
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from typing import List, Optional, Tuple

SCHEMES = ("mailto", "smtp", "smtps")
_LOOPBACK = ("localhost", "127.0.0.1", "::1")


def is_mail(url: str) -> bool:
    return urllib.parse.urlsplit(url).scheme in SCHEMES


def _addresses(text: str) -> List[str]:
    return [a.strip() for a in urllib.parse.unquote(text).split(",") if a.strip()]


def parse(url: str) -> Tuple[str, str, int, Optional[str], Optional[str], List[str], Optional[str]]:
    """(scheme, host, port, user, password, recipients, sender); ValueError naming the part that is wrong."""
    parts = urllib.parse.urlsplit(url)
    query = urllib.parse.parse_qs(parts.query)
    sender = query.get("from", [None])[0]
    if parts.scheme == "mailto":
        to = _addresses(parts.path)
        if not to:
            raise ValueError("mailto: has no address")
        return "smtp", "localhost", 25, None, None, to, sender
    to = [a for v in query.get("to", []) for a in _addresses(v)]
    if not to:
        raise ValueError(f"{parts.scheme}: has no ?to=ADDRESS")
    if not parts.hostname:
        raise ValueError(f"{parts.scheme}: has no server")
    port = parts.port or (465 if parts.scheme == "smtps" else 25)
    user = urllib.parse.unquote(parts.username) if parts.username else None
    password = urllib.parse.unquote(parts.password) if parts.password else None
    return parts.scheme, parts.hostname, port, user, password, to, sender


def send(url: str, subject: str, text: str, timeout: float) -> None:
    """Send the message; raises on any failure (the caller masks and reports it)."""
    scheme, host, port, user, password, to, sender = parse(url)
    msg = EmailMessage()
    msg["Subject"] = subject
    msg["From"] = sender or f"hpc-launch@{socket.gethostname()}"
    msg["To"] = ", ".join(to)
    msg["Date"] = formatdate(localtime=True)
    msg["Message-ID"] = make_msgid(domain=socket.gethostname())
    msg.set_content(text + "\n")
    tls = ssl.create_default_context()
    server: smtplib.SMTP
    if scheme == "smtps":
        server = smtplib.SMTP_SSL(host, port, timeout=timeout, context=tls)
    else:
        server = smtplib.SMTP(host, port, timeout=timeout)
    with server:
        server.ehlo()
        secure = scheme == "smtps"
        if not secure and server.has_extn("starttls"):
            server.starttls(context=tls)
            server.ehlo()
            secure = True
        if user:
            if not secure and host not in _LOOPBACK:
                raise ValueError("the server offers no TLS: the password is not sent in clear (use smtps://)")
            server.login(user, password or "")
        server.send_message(msg)
