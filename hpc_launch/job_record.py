"""A job's record and a remembered bad host: the rows of the job store (records.py), how a row is
read back and written, and which host names a bad-host row may hold."""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path
from typing import List, Optional

import msgspec
from msgspec import field

from hpc_launch.errors import StoreError
from hpc_launch.states import JobState

JSON_FIELDS = {"submit_argv": list, "extra": dict}  # column -> the type its JSON must decode to


class JobRecord(msgspec.Struct):
    job_id: str
    cluster: str
    dialect: str
    host: str  # "localhost" or the ssh alias the job was submitted through
    name: str
    workdir: str  # paths below are on `host`
    script_path: str
    log_path: str
    exit_path: str
    submit_time: float
    state: str = "queued"
    exit_code: Optional[int] = None
    end_time: Optional[float] = None
    submit_argv: List[str] = field(default_factory=list)
    profile_path: Optional[str] = None
    extra: dict = field(default_factory=dict)
    comment: str = ""  # the scheduler's latest word on the job (why it waits, how it ended)

    @property
    def bad_hosts_path(self) -> str:
        """Where the job lists hosts it found bad (beside the exit-code file: protocol.py)."""
        from .protocol import EXIT_FILE_SUFFIX, bad_hosts_path_for

        log = self.exit_path[: -len(EXIT_FILE_SUFFIX)] if self.exit_path.endswith(EXIT_FILE_SUFFIX) else self.exit_path
        return bad_hosts_path_for(log)

    @property
    def script_name(self) -> str:
        """The job script's file name: unique per submission (it carries a time stamp)."""
        return os.path.basename(self.script_path)


class BadHost(msgspec.Struct, frozen=True):
    cluster: str
    host: str
    reason: str  # what the job that found it said: "preflight: eth0 has no IPv4 address", "hang", ...
    job_id: str  # the job that found it
    since: float
    until: float  # forgotten after this (protocol.BAD_HOST_TTL_S)


# A bad-host row is the project's own: a host name, a reason one of its checks gives (the pre-flight
# gate, the watchdog, the spares check, a node failure the scheduler names), never the machine the
# user is on when the jobs run from it (no scheduler: `local`, where it would end every later job).
_HOST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}\Z")
BAD_HOST_ORIGINS = ("preflight:", "watchdog:", "spares check:", "node failure")


def well_formed_host(host: object) -> bool:
    return isinstance(host, str) and bool(_HOST_NAME.match(host))


def this_machine() -> "set[str]":
    """The names this machine answers to as a job's host (what a local job's checks would write)."""
    import socket

    name = socket.gethostname()
    return {"localhost", "localhost.localdomain", "127.0.0.1", "::1", name, name.split(".")[0]}


def recordable_bad_hosts(reasons: "dict[str, str]", *, here: bool) -> "dict[str, str]":
    """What of a job's bad-hosts report may be remembered: `here` when its hosts include this machine."""
    mine = this_machine() if here else set()
    return {
        host: reason
        for host, reason in reasons.items()
        if well_formed_host(host) and reason.startswith(BAD_HOST_ORIGINS) and host not in mine
    }


def adopt_command(cluster: str, job_id: str, workdir: str, name: str, script_path: str, host: str) -> str:
    """The `hpc-launch adopt` line that records this job again (it replaces a record with its id)."""
    from .protocol import LOCAL_HOST

    argv = ["hpc-launch", "adopt", job_id, "--cluster", cluster, "--workdir", workdir, "--name", name]
    argv += ["--script", script_path] + ([] if host == LOCAL_HOST else ["--login", host])
    return shlex.join(argv)


class DamagedRecord(StoreError):
    """One job's row cannot be read back (a column that does not decode): the other rows can."""

    def __init__(self, path: Path, values: dict, problem: str):
        self.cluster, self.job_id = str(values["cluster"]), str(values["job_id"])
        again = adopt_command(
            self.cluster,
            self.job_id,
            *(str(values[k]) for k in ("workdir", "name", "script_path", "host")),
        )
        super().__init__(
            f"the record of job {self.job_id} on {self.cluster} in {path} is damaged ({problem})",
            hint=f"record it again: {again}",
        )


COLUMNS = list(JobRecord.__struct_fields__)
BAD_HOST_COLUMNS = list(BadHost.__struct_fields__)


def to_row(values: dict) -> dict:
    row = {}
    for key, value in values.items():
        if key in JSON_FIELDS:
            value = json.dumps(value)
        elif key == "state":
            value = getattr(value, "value", value)  # JobState or plain str
        row[key] = value
    return row


def from_row(row: tuple, path: Path) -> JobRecord:
    """The record a row holds; DamagedRecord when a column does not decode to what it must."""
    values = dict(zip(COLUMNS, row))
    column = "state"
    try:
        JobState(values["state"])
        for column, kind in JSON_FIELDS.items():
            values[column] = json.loads(values[column])
            if not isinstance(values[column], kind):
                raise ValueError(f"{type(values[column]).__name__} where a JSON {kind.__name__} belongs")
    except (TypeError, ValueError) as exc:  # JSONDecodeError is a ValueError
        raise DamagedRecord(path, values, f"column {column}: {exc}") from None
    return JobRecord(**values)
