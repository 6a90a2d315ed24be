"""Cluster profiles: one YAML file per site, one schema, discovery and override.

Search order (later wins for the same name): the profiles shipped with the package, then the
user's config dir (paths.user_dir: ~/.config/hpc-launch/clusters/*.yaml), then
$HPC_LAUNCH_CLUSTERS_DIR, then `--profile FILE`. A user file may be partial: it is deep-merged
over the profile of the same name (so `abci.yaml` holding only `group: {default: gxx}` works),
or may say `extends: <name>` to start a new profile from another one.

The schema is msgspec (fast to import: the dry-run path must stay close to `import jinja2, yaml`).
"""

import os
import re
import time
from functools import lru_cache
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union, get_args

import msgspec

from ..errors import ProfileError
from ..paths import NotAUserFile, clusters_dirs, load_yaml, read_user_file

# The schema's names, re-exported: callers say `profiles.Profile` (profile_schema.py holds them).
from .schema import Charge as Charge
from .schema import Container as Container
from .schema import Dialect, GroupWhere, Launcher, LogLive, MasterAddr, Status
from .schema import Group as Group
from .schema import Launch as Launch
from .schema import LogSpec as LogSpec
from .schema import Modules as Modules
from .schema import Node as Node
from .schema import Profile as Profile
from .schema import PythonEnv as PythonEnv
from .schema import Queue as Queue
from .schema import Rendezvous as Rendezvous
from .schema import Stage as Stage
from .schema import Tier as Tier

# ---------------------------------------------------------------------------------------------
# discovery and loading


class ParsedCache:
    """Parsed profile files kept on disk between runs, keyed by path, mtime, ctime, size and inode.

    Parsing the dozen shipped YAML files (facts and all) is the largest single cost of a cold
    dry-run: with every file unchanged, the run neither parses YAML nor imports the YAML library.
    marshal is the interpreter's own loader; a file whose data it cannot hold (a YAML date, say)
    is simply parsed every time. A cache that cannot be read or written is only slower.
    """

    LIMIT = 256  # entries; test suites and many override dirs would otherwise grow it forever
    RACY_NS = 2_000_000_000

    def __init__(self) -> None:
        self.path = self._location()
        self.entries: Dict[str, Tuple[Tuple[int, ...], bytes]] = {}
        self.dirty = False
        if self.path is not None:
            try:
                import marshal

                loaded = marshal.loads(self.path.read_bytes())
                if isinstance(loaded, dict):
                    self.entries = loaded
            except (OSError, EOFError, ValueError, TypeError):
                pass

    @staticmethod
    def _location() -> Optional[Path]:
        if os.environ.get("HPC_LAUNCH_NO_CACHE"):
            return None
        try:
            from .. import __version__
            from ..paths import user_dir

            return user_dir("cache") / f"profiles-{__version__}.marshal"
        except Exception:  # noqa: BLE001 - no usable home: parse every time
            return None

    def read(self, path: Path) -> Dict[str, Any]:
        import marshal

        try:
            st = path.stat()
        except OSError:
            return _read_yaml(path)  # raises the one-line error
        stamp = (st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino)
        key = str(path)
        hit = self.entries.get(key)
        if hit is not None and tuple(hit[0]) == stamp:
            try:
                return marshal.loads(hit[1])
            except (EOFError, ValueError, TypeError):
                pass
        data = _read_yaml(path)
        if time.time_ns() - st.st_ctime_ns < self.RACY_NS:
            # File times tick in jiffies: a file rewritten twice within one tick, at the same
            # size, would look unchanged. Trust only files that have been quiet a while (git's
            # "racily clean" rule).
            self.entries.pop(key, None)
            return data
        try:
            self.entries[key] = (stamp, marshal.dumps(data))
            self.dirty = True
        except ValueError:  # a value marshal cannot hold: parse this file every time
            self.entries.pop(key, None)
        return data

    def save(self) -> None:
        if not self.dirty or self.path is None:
            return
        import marshal
        import tempfile

        entries = dict(list(self.entries.items())[-self.LIMIT :])
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".profiles-")
            with os.fdopen(fd, "wb") as fh:
                fh.write(marshal.dumps(entries))
            os.replace(tmp, self.path)  # atomic: a concurrent reader sees the old or the new file
        except OSError:
            pass


_Found = Dict[str, Tuple[Dict[str, Any], List[Path]]]
# `--profile FILE`, given once or more: each file merged in turn, after every other source
ProfileFiles = Union[None, str, Sequence[str]]


def _read_yaml(path: Path) -> Dict[str, Any]:
    import yaml  # only when a file changed since it was last parsed (see ParsedCache)

    try:
        data = load_yaml(read_user_file(path))
    except NotAUserFile as exc:
        raise ProfileError(
            f"cannot read profile {path}: {exc.strerror}", hint="a profile is a small YAML file"
        ) from None
    except OSError as exc:
        raise ProfileError(f"cannot read profile {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        line = exc.object[: exc.start].count(b"\n") + 1
        raise ProfileError(
            f"{path} line {line}: not valid UTF-8 (byte {exc.object[exc.start]:#04x})", hint="save the file as UTF-8"
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise ProfileError(f"{path}{where}: not valid YAML ({getattr(exc, 'problem', None) or exc})") from None
    if not isinstance(data, dict):
        raise ProfileError(f"{path}: a profile is a YAML mapping of keys (see `hpc-launch clusters show local`)")
    return data


def _deep_merge(base: Dict[str, Any], over: Dict[str, Any]) -> Dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _add(found: _Found, raw: Dict[str, Any], path: Path) -> str:
    name = str(raw.get("name") or path.stem)
    raw.setdefault("name", name)
    if name in found and "extends" not in raw:
        base, sources = found[name]
        found[name] = (_deep_merge(base, raw), sources + [path])
    else:
        found[name] = (raw, [path])
    return name


@lru_cache(maxsize=4)
def _discover(dirs: Tuple[Path, ...]) -> Tuple[_Found, Dict[str, ProfileError]]:
    """Every profile found, and the files that could not be read, by file name: a broken user
    override breaks only the cluster it is named after, never the others."""
    found: _Found = {}
    broken: Dict[str, ProfileError] = {}
    cache = ParsedCache()
    for directory in dirs:
        if directory.is_dir():
            # what glob("*.yaml") finds, without its pattern machinery (~1 ms of a dry-run)
            with os.scandir(directory) as entries:
                paths = sorted(directory / e.name for e in entries if e.name.endswith(".yaml"))
            for path in paths:
                try:
                    _add(found, cache.read(path), path)
                except ProfileError as exc:
                    broken[path.stem] = exc
    cache.save()
    return found, broken


def _all(profile_file: ProfileFiles = None) -> Tuple[_Found, List[str], Dict[str, ProfileError]]:
    """Every profile, the clusters the --profile files name (in turn, each once) and the broken ones."""
    discovered, broken = _discover(tuple(clusters_dirs()))
    found = dict(discovered)
    files = [profile_file] if isinstance(profile_file, str) else list(profile_file or ())
    named: List[str] = []
    for f in filter(None, files):
        name = _add(found, _read_yaml(Path(f)), Path(f))
        named += [] if name in named else [name]
    return found, named, broken


def _resolve_raw(name: str, found: _Found, seen: Tuple[str, ...] = ()) -> Tuple[Dict[str, Any], List[Path]]:
    raw, sources = found[name]
    parent = raw.get("extends")
    if not parent:
        return raw, sources
    if parent in seen or parent == name:
        raise ProfileError(f"{sources[-1]}: `extends: {parent}` makes a cycle")
    if parent not in found:
        raise ProfileError(f"{sources[-1]}: `extends: {parent}` names no known cluster ({', '.join(sorted(found))})")
    base, base_sources = _resolve_raw(parent, found, seen + (name,))
    child = {k: v for k, v in raw.items() if k != "extends"}
    return _deep_merge(base, child), base_sources + sources


_ALLOWED = {
    "dialect": Dialect,
    "launch.launcher": Launcher,
    "status": Status,
    "log.live": LogLive,
    "group.where": GroupWhere,
    "rendezvous.master_addr": MasterAddr,
}


def _validate(raw: Dict[str, Any], sources: List[Path]) -> Profile:
    raw = {k: v for k, v in raw.items() if k != "extends"}
    try:
        return msgspec.convert(raw, Profile)
    except msgspec.ValidationError as exc:
        text = str(exc)
        m = re.search(r" - at `\$\.?([^`]*)`$", text)
        key = m.group(1) if m else ""
        msg = text[: m.start()] if m else text
        unknown = re.match(r"Object contains unknown field `(\w+)`", msg)
        missing = re.match(r"Object missing required field `(\w+)`", msg)
        if unknown:
            key = f"{key}.{unknown.group(1)}" if key else unknown.group(1)
            msg = "is not a known key (typo?)"
        elif missing:
            key = f"{key}.{missing.group(1)}" if key else missing.group(1)
            msg = "is required"
        elif key in _ALLOWED:
            msg = f"{msg}; allowed: {', '.join(get_args(_ALLOWED[key]))}"
        where = f"key `{key}`: " if key else ""
        raise ProfileError(f"{sources[-1]}: {where}{msg}") from None


def available() -> List[str]:
    found, _, broken = _all()
    return sorted(set(found) | set(broken))


def load(name: Optional[str], *, profile_file: ProfileFiles = None) -> Profile:
    """The resolved profile `name`; `profile_file` (the --profile files, in turn) is merged last."""
    found, named, broken = _all(profile_file)
    if not name and len(named) > 1:
        raise ProfileError(
            f"the --profile files name {len(named)} clusters ({', '.join(named)})", hint="pick one with --cluster NAME"
        )
    name = name or (named[0] if named else "local")
    if name in broken:
        raise broken[name]
    if name not in found:
        import difflib

        close = difflib.get_close_matches(name, list(found), n=1, cutoff=0.5)
        hint = f"did you mean `{close[0]}`?" if close else f"known: {', '.join(sorted(found))}"
        raise ProfileError(f"unknown cluster {name!r}", hint=f"{hint} `hpc-launch clusters` lists them")
    raw, sources = _resolve_raw(name, found)
    return _validate(raw, sources)


def sources_of(name: str, *, profile_file: ProfileFiles = None) -> List[Path]:
    found = _all(profile_file)[0]
    return list(_resolve_raw(name, found)[1]) if name in found else []


def summaries() -> List[Dict[str, Any]]:
    """One row per known cluster for `hpc-launch clusters` (keys: docs/commands.md); a profile
    that does not load is a row with status "broken" and its one-line error, never a failure."""
    from ..errors import HpcLaunchError

    rows: List[Dict[str, Any]] = []
    for name in available():
        try:
            p = load(name)
        except HpcLaunchError as exc:
            rows.append({"name": name, "status": "broken", "error": exc.one_line()})
            continue
        rows.append(
            {
                "name": p.name,
                "scheduler": p.dialect,
                "gpus_per_node": p.node.gpus,
                "launcher": p.launch.launcher,
                "status": p.status,
                "title": p.title,
                "queues": sorted(p.queues),
                "login": p.login,
            }
        )
    return rows


def resolved_yaml(name: str, profile_file: ProfileFiles = None) -> str:
    """`clusters show NAME`: the profile as resolved (defaults filled, overrides merged), with
    the files it came from."""
    import yaml

    p = load(name, profile_file=profile_file)
    sources = sources_of(p.name, profile_file=profile_file)
    return (
        "# from: "
        + ", ".join(str(s) for s in sources)
        + "\n"
        + yaml.safe_dump(p.to_dict(), sort_keys=False, allow_unicode=True)
    )
