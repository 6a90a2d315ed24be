"""The jobs this user submitted: a small sqlite file shared by every hpc-launch process.

Several hpc-launch processes (a `submit` while a `logs -f` updates states) may write at
once, so: WAL journal, a busy timeout, and short `BEGIN IMMEDIATE` write transactions.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, List, Optional, Union

from msgspec.structs import asdict

from hpc_launch.errors import AmbiguousJob, HpcLaunchError, JobNotFound, StoreError
from hpc_launch.job_record import BAD_HOST_COLUMNS as _BAD_HOST_COLUMNS
from hpc_launch.job_record import (  # re-exported: callers import the record's types from here
    BAD_HOST_ORIGINS,
    BadHost,
    DamagedRecord,
    JobRecord,
    adopt_command,
    recordable_bad_hosts,
    this_machine,
    well_formed_host,
)
from hpc_launch.job_record import COLUMNS as _COLUMNS
from hpc_launch.job_record import from_row as _from_row
from hpc_launch.job_record import to_row as _to_row
from hpc_launch.paths import no_bad_hosts_marker, store_path
from hpc_launch.states import TERMINAL

__all__ = [
    "BAD_HOST_ORIGINS",
    "SCHEMA_VERSION",
    "BadHost",
    "DamagedRecord",
    "JobRecord",
    "JobStore",
    "adopt_command",
    "default_path",
    "recordable_bad_hosts",
    "this_machine",
    "well_formed_host",
]

SCHEMA_VERSION = 3
_BUSY_TIMEOUT_S = 30.0
_KEY_FIELDS = ("cluster", "job_id")

_SELECT = f"SELECT {', '.join(_COLUMNS)} FROM jobs"
# Each entry upgrades the schema by one version; append, never edit.
_MIGRATIONS = [
    """
    CREATE TABLE jobs (
        cluster TEXT NOT NULL, job_id TEXT NOT NULL, dialect TEXT NOT NULL, host TEXT NOT NULL,
        name TEXT NOT NULL, workdir TEXT NOT NULL, script_path TEXT NOT NULL, log_path TEXT NOT NULL,
        exit_path TEXT NOT NULL, submit_time REAL NOT NULL, state TEXT NOT NULL,
        exit_code INTEGER, end_time REAL, submit_argv TEXT NOT NULL, profile_path TEXT,
        extra TEXT NOT NULL,
        PRIMARY KEY (cluster, job_id)
    );
    CREATE INDEX jobs_by_time ON jobs (submit_time DESC);
    CREATE INDEX jobs_by_id ON jobs (job_id);
    """,
    "ALTER TABLE jobs ADD COLUMN comment TEXT NOT NULL DEFAULT ''",
    # hosts a job found bad (the gate, the watchdog, a lost node): later jobs avoid them until `until`
    """
    CREATE TABLE bad_hosts (
        cluster TEXT NOT NULL, host TEXT NOT NULL, reason TEXT NOT NULL, job_id TEXT NOT NULL,
        since REAL NOT NULL, until REAL NOT NULL,
        PRIMARY KEY (cluster, host)
    )
    """,
]
assert len(_MIGRATIONS) == SCHEMA_VERSION


def default_path() -> Path:
    return store_path()  # in paths.py: asking whether a store exists needs no sqlite3


class JobStore:
    def __init__(self, path: Union[str, Path, None] = None):
        self.path = Path(path) if path is not None else default_path()
        with self._guard("open"):
            self._open()

    @contextmanager
    def _guard(self, doing: str) -> Iterator[None]:
        """sqlite's and the file system's errors as one line that names the file and the fix."""
        try:
            yield
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                raise StoreError(
                    f"the job store {self.path} stayed locked by another process for {_BUSY_TIMEOUT_S:g} s ({doing})",
                    hint="wait for the other hpc-launch to finish, then retry",
                ) from None
            raise StoreError(
                f"cannot {doing} the job store {self.path}: {exc}",
                hint="check the disk is not full or read-only, or set HPC_LAUNCH_STATE_DIR to a writable directory",
            ) from None
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"the job store {self.path} is damaged ({exc})", hint=self._move_aside()) from None
        except OSError as exc:
            raise StoreError(
                f"cannot {doing} the job store {self.path}: {exc.strerror}",
                hint="check its directory is writable, or set HPC_LAUNCH_STATE_DIR to a writable directory",
            ) from None

    def _move_aside(self) -> str:
        return f"move it aside (mv {self.path} {self.path}.broken) and run `hpc-launch adopt` for jobs you still need"

    def _open(self) -> None:
        try:
            # Records name paths and command lines: keep them private to the user.
            self.path.parent.mkdir(parents=True, mode=0o700)
        except FileExistsError:
            pass  # there already, or made a moment ago by another hpc-launch (twenty submits at once)
        else:
            os.chmod(self.path.parent, 0o700)  # mkdir's mode is filtered by umask
        if not self.path.exists():
            os.close(os.open(self.path, os.O_CREAT | os.O_WRONLY, 0o600))
        self._lock = threading.Lock()
        self._db = sqlite3.connect(
            str(self.path), timeout=_BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
        )
        self._db.execute(f"PRAGMA busy_timeout = {int(_BUSY_TIMEOUT_S * 1000)}")
        self._db.execute("PRAGMA journal_mode = WAL")
        self._db.execute("PRAGMA synchronous = NORMAL")  # safe with WAL; a crash loses at most the last commit
        self._migrate()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """A short write transaction; BEGIN IMMEDIATE takes the write lock up front, so two writers
        queue on busy_timeout instead of failing with "database is locked" on lock upgrade."""
        with self._guard("write"), self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _migrate(self) -> None:
        with self._write() as db:
            db.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            row = db.execute("SELECT version FROM schema_version").fetchone()
            current = row[0] if row else 0
            if current > SCHEMA_VERSION:
                raise HpcLaunchError(
                    f"job records in {self.path} were written by a newer hpc-launch (schema {current})",
                    hint="upgrade hpc-launch, or point HPC_LAUNCH_STATE_DIR elsewhere",
                )
            for sql in _MIGRATIONS[current:]:
                for statement in filter(str.strip, sql.split(";")):
                    try:
                        db.execute(statement)
                    except sqlite3.OperationalError as exc:  # e.g. another program's `jobs` table
                        if "locked" in str(exc) or "busy" in str(exc):
                            raise
                        raise StoreError(
                            f"the job store {self.path} cannot be brought to schema {SCHEMA_VERSION} ({exc})",
                            hint=self._move_aside(),
                        ) from None
            if row is None:
                db.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))
            elif current < SCHEMA_VERSION:
                db.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION,))
            self._check_tables(db)
            db.execute("DELETE FROM bad_hosts WHERE until <= ?", (time.time(),))  # expired: never shown again
            self._mark_bad_hosts(db)

    def _mark_bad_hosts(self, db: sqlite3.Connection) -> None:
        """The no-bad-hosts marker (paths.no_bad_hosts_marker) as the table is; inside a write
        transaction, so no insert can come between the count and the marker."""
        marker = no_bad_hosts_marker(self.path)
        if db.execute("SELECT count(*) FROM bad_hosts").fetchone()[0]:
            marker.unlink(missing_ok=True)
        else:
            marker.touch(mode=0o600)

    def _check_tables(self, db: sqlite3.Connection) -> None:
        """A store whose schema version is current but whose tables were dropped or changed would
        take no record: refuse it on open, with the fix."""
        for table, columns in (("jobs", _COLUMNS), ("bad_hosts", _BAD_HOST_COLUMNS)):
            have = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
            missing = [c for c in columns if c not in have]
            if missing:
                what = f"no `{table}` table" if not have else f"no column {', '.join(missing)} in its `{table}` table"
                raise StoreError(
                    f"the job store {self.path} has {what}, so it cannot record jobs", hint=self._move_aside()
                )

    def check_writable(self) -> None:
        """Write a job's row and roll it back: a store that could not take the record fails here,
        before a job exists that it would have to record."""
        row = _to_row(asdict(JobRecord("", "", "", "", "", "", "", "", "", 0.0)))
        with self._guard("write"), self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute(
                    f"INSERT OR REPLACE INTO jobs ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' for _ in _COLUMNS)})",
                    [row[c] for c in _COLUMNS],
                )
            finally:
                self._db.execute("ROLLBACK")

    def add(self, rec: JobRecord) -> None:
        """Record a submitted job. Schedulers reuse ids (PBS and Grid Engine wrap around), so a
        new job with a recorded (cluster, job_id) replaces the old record."""
        row = _to_row(asdict(rec))
        placeholders = ", ".join("?" for _ in _COLUMNS)
        with self._write() as db:
            old = db.execute(
                "SELECT submit_time FROM jobs WHERE cluster = ? AND job_id = ?", (rec.cluster, rec.job_id)
            ).fetchone()
            if old is not None:
                import logging  # only here: a dry-run reads the store and never warns

                logging.getLogger(__name__).warning(
                    "job id %s on %s was already recorded; replacing the old record", rec.job_id, rec.cluster
                )
            db.execute(
                f"INSERT OR REPLACE INTO jobs ({', '.join(_COLUMNS)}) VALUES ({placeholders})",
                [row[c] for c in _COLUMNS],
            )

    def get(self, job_id: str, cluster: Optional[str] = None) -> JobRecord:
        """The job with that id; "1234" also finds "1234.pbs-server" if unambiguous."""
        job_id = job_id.strip()
        where, args = ("AND cluster = ?", [cluster]) if cluster else ("", [])
        with self._guard("read"), self._lock:
            rows = self._db.execute(f"{_SELECT} WHERE job_id = ? {where}", [job_id, *args]).fetchall()
            if not rows:
                pattern = job_id.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + ".%"
                rows = self._db.execute(
                    f"{_SELECT} WHERE job_id LIKE ? ESCAPE '\\' {where}", [pattern, *args]
                ).fetchall()
        if not rows:
            on = f" on cluster {cluster}" if cluster else ""
            raise JobNotFound(f"no record of job {job_id}{on}", hint="`hpc-launch list` shows the recorded jobs")
        if len(rows) > 1:
            keys = [dict(zip(_COLUMNS, r)) for r in rows]  # only the keys: one row may be damaged
            clusters = sorted({k["cluster"] for k in keys})
            if len(clusters) > 1:
                raise AmbiguousJob(
                    f"job id {job_id} is recorded on clusters {', '.join(clusters)}",
                    hint="choose one with --cluster " + " or --cluster ".join(clusters),
                )
            raise HpcLaunchError(
                f"job id {job_id} matches {', '.join(k['job_id'] for k in keys)}", hint="give the full job id"
            )
        return _from_row(rows[0], self.path)

    def list(
        self,
        cluster: Optional[str] = None,
        active_only: bool = False,
        limit: Optional[int] = None,
        on_damaged: Optional[Callable[[DamagedRecord], None]] = None,
    ) -> List[JobRecord]:
        """Newest first. A damaged row is left out (the others are listed) and handed to
        `on_damaged`, which the commands that list jobs use to name it."""
        sql = f"{_SELECT} WHERE 1=1"
        args: List[object] = []
        if cluster:
            sql += " AND cluster = ?"
            args.append(cluster)
        if active_only:
            done = sorted(s.value for s in TERMINAL)
            sql += f" AND state NOT IN ({', '.join('?' for _ in done)})"
            args += done
        sql += " ORDER BY submit_time DESC, rowid DESC"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(int(limit))
        with self._guard("read"), self._lock:
            rows = self._db.execute(sql, args).fetchall()
        records = []
        for row in rows:
            try:
                records.append(_from_row(row, self.path))
            except DamagedRecord as damaged:
                if on_damaged is not None:
                    on_damaged(damaged)
        return records

    def update(self, cluster: str, job_id: str, **changes: Any) -> None:
        unknown = set(changes) - (set(_COLUMNS) - set(_KEY_FIELDS))
        if unknown:
            raise ValueError(f"cannot update {sorted(unknown)}: not updatable JobRecord fields")
        if not changes:
            return
        row = _to_row(changes)
        assignments = ", ".join(f"{c} = ?" for c in row)
        with self._write() as db:
            cur = db.execute(
                f"UPDATE jobs SET {assignments} WHERE cluster = ? AND job_id = ?", [*row.values(), cluster, job_id]
            )
            if cur.rowcount == 0:
                raise JobNotFound(
                    f"no record of job {job_id} on cluster {cluster}", hint="`hpc-launch list` shows the recorded jobs"
                )

    # ---- hosts found bad, remembered per cluster until they expire ---------------------------

    def add_bad_hosts(self, cluster: str, reasons: "dict[str, str]", job_id: str, ttl_s: float) -> "dict[str, str]":
        """Remember `reasons` (host -> why) for `ttl_s`; a host seen bad again gets the new reason.
        A name that is not a host name is never written. Returns what was remembered."""
        reasons = {host: reason for host, reason in reasons.items() if well_formed_host(host)}
        now = time.time()
        with self._write() as db:
            no_bad_hosts_marker(self.path).unlink(missing_ok=True)  # before the rows: never a marker beside them
            for host, reason in reasons.items():
                db.execute(
                    "INSERT OR REPLACE INTO bad_hosts (cluster, host, "
                    "reason, job_id, since, until) VALUES (?, ?, ?, ?, ?, ?)",
                    (cluster, host, reason, job_id, now, now + ttl_s),
                )
            self._mark_bad_hosts(db)
        return reasons

    def bad_hosts(self, cluster: Optional[str] = None, *, here: bool = False) -> List["BadHost"]:
        """The hosts still remembered as bad (expired ones are not), oldest first. Rows that are
        not a host name (an older version's, a hand edit) are left out: `malformed_bad_hosts`
        names them. `here`: without this machine's names (a cluster with no scheduler)."""
        mine = this_machine() if here else set()
        return [b for b in self._bad_host_rows(cluster) if well_formed_host(b.host) and b.host not in mine]

    def malformed_bad_hosts(self, cluster: Optional[str] = None) -> List["BadHost"]:
        """The remembered rows `bad_hosts` leaves out because they name no host."""
        return [b for b in self._bad_host_rows(cluster) if not well_formed_host(b.host)]

    def _bad_host_rows(self, cluster: Optional[str]) -> List["BadHost"]:
        sql = "SELECT cluster, host, reason, job_id, since, until FROM bad_hosts WHERE until > ?"
        args: List[object] = [time.time()]
        if cluster:
            sql += " AND cluster = ?"
            args.append(cluster)
        with self._guard("read"), self._lock:
            rows = self._db.execute(sql + " ORDER BY since", args).fetchall()
        # a hand-edited row may hold a number where a name belongs: read as text, never a crash
        return [BadHost(str(c), str(h), str(r), str(j), since, until) for c, h, r, j, since, until in rows]

    def forget_bad_hosts(self, cluster: Optional[str] = None, hosts: Optional[List[str]] = None) -> int:
        """Forget hosts (all of a cluster's, or those named); returns how many were forgotten."""
        sql, args = "DELETE FROM bad_hosts WHERE 1=1", []
        if cluster:
            sql, args = sql + " AND cluster = ?", [cluster]
        if hosts:
            sql += f" AND host IN ({', '.join('?' for _ in hosts)})"
            args += list(hosts)
        with self._write() as db:
            forgotten = db.execute(sql, args).rowcount
            self._mark_bad_hosts(db)
            return forgotten

    def close(self) -> None:
        with self._lock:
            self._db.close()
