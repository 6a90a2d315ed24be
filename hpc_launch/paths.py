"""Where shipped data (profiles, templates) and user files live."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, List

_PKG = Path(__file__).resolve().parent


def _shipped(sub: str) -> Path:
    # In a wheel the data sits inside the package (hatch force-include); in a checkout or an
    # editable install it sits at the repository root beside the package.
    inside = _PKG / sub
    return inside if inside.is_dir() else _PKG.parent / sub


# XDG's variable and default for each kind of per-user directory (the XDG Base Directory spec).
_XDG = {
    "config": ("XDG_CONFIG_HOME", "~/.config"),
    "cache": ("XDG_CACHE_HOME", "~/.cache"),
    "state": ("XDG_STATE_HOME", "~/.local/state"),
}


def user_dir(kind: str) -> Path:
    """The user's `kind` directory for hpc-launch ("config", "cache" or "state").

    On Linux that is the XDG rule, read here: platformdirs gives the same answer (a fast-tier
    test holds the two equal) but its import costs ~3 ms of a ~90 ms dry-run, the command whose
    start-up issue 18 measures. Elsewhere (a laptop on macOS or Windows) platformdirs decides."""
    home = os.environ.get("HOME", "")
    if sys.platform.startswith("linux") and "ANDROID_DATA" not in os.environ and os.path.isabs(home):
        variable, default = _XDG[kind]
        value = os.environ.get(variable, "")
        # the spec: a relative value is invalid and ignored
        base = value if os.path.isabs(value) else home.rstrip("/") + default[1:]
        return Path(base) / "hpc-launch"
    import platformdirs

    return Path(getattr(platformdirs, f"user_{kind}_dir")("hpc-launch"))


def user_config_dir() -> Path:
    override = os.environ.get("HPC_LAUNCH_CONFIG_DIR")
    return Path(override) if override else user_dir("config")


def store_path() -> Path:
    """The job store (records.JobStore): $HPC_LAUNCH_STATE_DIR/jobs.sqlite, else the user's state dir."""
    override = os.environ.get("HPC_LAUNCH_STATE_DIR")
    if override:
        return Path(override).expanduser() / "jobs.sqlite"
    return user_dir("state") / "jobs.sqlite"


def no_bad_hosts_marker(store: Path) -> Path:
    """Beside the job store: present only while it remembers no bad host (records.JobStore keeps
    it so, under its write lock), so a submit learns that without opening sqlite."""
    return store.with_name(store.name + ".no-bad-hosts")


def clusters_dirs() -> List[Path]:
    dirs = [_shipped("clusters"), user_config_dir() / "clusters"]
    extra = os.environ.get("HPC_LAUNCH_CLUSTERS_DIR")
    if extra:
        dirs += [Path(p) for p in extra.split(os.pathsep) if p]
    return dirs


def templates_dirs() -> List[Path]:
    # User templates first: a file of the same name overrides the shipped one.
    return [user_config_dir() / "templates", _shipped("templates")]


# Profiles, project files and templates are a few KiB: a bigger one is a mistake (a log, a device).
USER_FILE_LIMIT = 1 << 20
# Values one YAML file may expand to: the biggest shipped profile holds a few hundred, and an
# alias (*name) repeats its anchor's values, so nested aliases grow exponentially ("billion laughs").
YAML_VALUE_LIMIT = 100_000


class NotAUserFile(OSError):
    """A directory, a device, a FIFO or a file too big where a small text file was expected."""


def open_regular(path: "os.PathLike[str] | str", *, dev_null: bool = False) -> int:
    """A descriptor for reading `path`, a regular file: opened without blocking (a FIFO with no
    writer would wait forever in open(), and a device such as /dev/zero never ends), then checked.
    Raises NotAUserFile for a directory, a device, a FIFO or a socket (with `dev_null`, /dev/null
    is let through: `--config /dev/null`, deliberately empty), or another OSError."""
    import errno
    import stat

    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise NotAUserFile(errno.EISDIR, "is a directory, not a file", str(path))
        if not stat.S_ISREG(st.st_mode) and not (dev_null and os.path.samestat(st, os.stat(os.devnull))):
            raise NotAUserFile(errno.EINVAL, "is not a regular file but a device, FIFO or socket", str(path))
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path: "os.PathLike[str] | str", offset: int = 0, limit: int = USER_FILE_LIMIT) -> bytes:
    """At most `limit` bytes of a regular file from `offset` (open_regular: never a FIFO's wait)."""
    fd = open_regular(path)
    try:
        if offset:
            os.lseek(fd, offset, os.SEEK_SET)
        with os.fdopen(fd, "rb", closefd=False) as fh:
            return fh.read(limit)
    finally:
        os.close(fd)


def read_user_file(path: Path, limit: int = USER_FILE_LIMIT) -> str:
    """The UTF-8 text of a file the user names: a regular file of at most `limit` bytes, so that a
    directory, a FIFO or a device (/dev/zero) is an OSError naming why instead of a read that never
    ends. Raises NotAUserFile or another OSError (its strerror says why), or UnicodeDecodeError."""
    import errno

    fd = open_regular(path, dev_null=True)
    try:
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(limit + 1)  # the file may have grown since fstat
    finally:
        os.close(fd)
    if len(data) > limit:
        raise NotAUserFile(errno.EFBIG, f"is larger than {limit // 1024} KiB", str(path))
    return data.decode("utf-8")


def load_yaml(text: str) -> Any:
    """YAML (safe types only) that expands to at most YAML_VALUE_LIMIT values: aliases are
    resolved to shared objects, so a "billion laughs" loads at once and costs only when walked
    (str(), a deep merge, validation): count the values as if expanded, and stop at the limit."""
    import yaml

    data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    stack, seen = [data], 0
    while stack:
        value = stack.pop()
        seen += 1
        if seen > YAML_VALUE_LIMIT:
            raise yaml.YAMLError(
                f"it expands to more than {YAML_VALUE_LIMIT} values through aliases (*name); write the values out"
            )
        if isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, (list, tuple, set)):
            stack.extend(value)
    return data
