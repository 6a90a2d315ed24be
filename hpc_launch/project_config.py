"""hpc-launch.yaml: a project's defaults for `submit`, the same keys as its options, typed: its
schema is built from the option table's rows (hpc_launch/options.py, each row's `yaml` kind).

Its own module so that the msgspec schema is built only when a project has such a file
(building the class costs a cold dry-run several milliseconds).
"""

# No `from __future__ import annotations`: the schema class is built inside a function and
# msgspec must see its annotations evaluated there, not as strings.
import os
import re
from functools import lru_cache
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

from .errors import SpecError
from .spec import JobSpec

PROJECT_CONFIG_NAMES = ("hpc-launch.yaml", ".hpc-launch.yaml")


def find_project_config(start: Optional[Path] = None) -> Optional[Path]:
    here = (start or Path.cwd()).resolve()
    for directory in [here, *here.parents]:
        for name in PROJECT_CONFIG_NAMES:
            candidate = directory / name
            if os.path.lexists(candidate):  # a directory or a dangling link here is an error, not "no file"
                return candidate
        if (directory / ".git").exists():
            break
    return None


def _kinds() -> Dict[str, Tuple[Any, Any]]:
    """A row's `yaml` kind (hpc_launch/options.py) -> the key's type in the schema and its default."""
    from msgspec import Meta

    try:
        from typing import Annotated
    except ImportError:  # Python 3.8
        from typing_extensions import Annotated

    return {
        "text": (Optional[str], None),
        "count": (Optional[Annotated[int, Meta(ge=1)]], None),
        "gpus": (Optional[Annotated[int, Meta(ge=0)]], None),
        "port": (Optional[Annotated[int, Meta(ge=1, le=65535)]], None),
        "time": (Optional[Union[str, int]], None),  # 90 (minutes) or "1:30:00"
        "words": (Optional[Union[List[str], str]], None),  # a list, or one word
        "lines": (Union[List[str], str], []),
        "names": (List[str], []),
        "env": (Dict[str, Union[str, int, float, bool]], {}),
        "args": (Optional[Union[List[Union[str, int, float]], str]], None),  # a list, or one shell-quoted string
    }


@lru_cache(maxsize=1)
def _schema() -> type:
    """hpc-launch.yaml: the JobSpec fields whose option row has a project-file kind, typed (a typo
    is an error, not a default). Built on first use: most runs have no hpc-launch.yaml."""
    import msgspec

    kinds = _kinds()
    fields = [(row.field, *kinds[row.yaml]) for row in _rows().values()]
    return msgspec.defstruct("ProjectConfig", fields, module=__name__, forbid_unknown_fields=True, kw_only=True)


def _rows() -> Dict[str, Any]:
    """The project file's keys (JobSpec's order) -> their option rows."""
    from . import options

    rows = {row.field: row for row in options.job_rows() if row.yaml}
    return {key: rows[key] for key in JobSpec.keys() if key in rows}


_ALIASES = {
    "project": "group",
    "gpus": "gpus_per_node",
    "train-args": "train_args",
    "gpus-per-node": "gpus_per_node",
    "pass-env": "pass_env",
}


def load_project_config(path: Path) -> Dict[str, Any]:
    import msgspec
    import yaml

    from .paths import NotAUserFile, load_yaml, read_user_file

    try:
        data = load_yaml(read_user_file(path)) or {}
    except UnicodeDecodeError as exc:
        raise SpecError(f"{path}: not valid UTF-8 (byte {exc.start})", hint="save it as UTF-8") from None
    except NotAUserFile as exc:
        raise SpecError(
            f"{path}: cannot read the project config ({exc.strerror})",
            hint="a project file is a small YAML file: rename or remove this one, or name another with --config",
        ) from None
    except (OSError, yaml.YAMLError) as exc:
        raise SpecError(
            f"{path}: cannot read the project config "
            f"({getattr(exc, 'problem', None) or getattr(exc, 'strerror', None) or exc})"
        ) from None
    if not isinstance(data, dict):
        raise SpecError(f"{path}: the project config must be a YAML mapping (keys: {', '.join(JobSpec.keys())})")
    data = {_ALIASES.get(str(k), str(k)): v for k, v in data.items()}
    try:
        cfg: Any = msgspec.convert(data, _schema())
    except msgspec.ValidationError as exc:
        text = str(exc)
        unknown = re.match(r"Object contains unknown field `(\w+)`", text)
        if unknown:
            raise SpecError(
                f"{path}: unknown key {unknown.group(1)!r}", hint=f"known keys: {', '.join(JobSpec.keys())}"
            ) from None
        m = re.search(r" - at `\$\.?([^`]*)`$", text)
        where = f"key `{m.group(1)}`: " if m else ""
        raise SpecError(
            f"{path}: {where}{text[: m.start()] if m else text}",
            hint="see docs/commands.md for the keys and their types",
        ) from None
    rows = _rows()
    return {key: _normal(path, key, rows[key].yaml, getattr(cfg, key)) for key in data}


def _normal(path: Path, key: str, kind: str, value: Any) -> Any:
    """A key's value as the JobSpec field takes it: lists of strings, times as text."""
    if kind == "args" and isinstance(value, str):
        import shlex

        try:
            return shlex.split(value)
        except ValueError as exc:
            raise SpecError(f"{path}: key `{key}`: {exc}", hint="quote it as one shell word list") from None
    if kind == "args" and value is not None:
        return [str(v) for v in value]
    if kind == "env":
        return {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in value.items()}
    if kind in ("words", "lines") and isinstance(value, str):
        return [value]
    if kind == "time" and value is not None:
        return str(value)
    return value


def spec_for(config: Optional[str], overrides: Dict[str, Any]):
    """The JobSpec of a command: the project file (`config`, else ./hpc-launch.yaml if present)
    with the options given on the command line on top. An explicit empty --train-args ''
    means "no training arguments", not "the project file's"."""
    from .spec import spec_from

    path = Path(config) if config else find_project_config()
    base = load_project_config(path) if path else {}
    overrides = dict(overrides)
    if overrides.get("train_args") == []:
        overrides["train_args"] = None
        base["train_args"] = []
    return spec_from(base, overrides)
