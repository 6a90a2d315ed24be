"""hpc-launch.yaml: a project's defaults for `submit`, the same keys as its options, typed.

Its own module so that the msgspec schema is built only when a project has such a file
(building the class costs a cold dry-run several milliseconds).
"""

# No `from __future__ import annotations`: the schema class is built inside a function and
# msgspec must see its annotations evaluated there, not as strings.
import os
import re
from functools import lru_cache
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

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


@lru_cache(maxsize=1)
def _schema() -> type:
    """Built on first use: most runs have no hpc-launch.yaml and never pay for it."""
    import msgspec

    try:
        from typing import Annotated
    except ImportError:  # Python 3.8
        from typing_extensions import Annotated

    class ProjectConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
        """hpc-launch.yaml: the same keys as the submit options, typed (a typo is an error, not a default)."""

        cluster: Optional[str] = None
        nodes: Optional[Annotated[int, msgspec.Meta(ge=1)]] = None
        gpus_per_node: Optional[Annotated[int, msgspec.Meta(ge=0)]] = None
        queue: Optional[str] = None
        walltime: Optional[Union[str, int]] = None
        group: Optional[str] = None
        name: Optional[str] = None
        modules: Optional[Union[List[str], str]] = None
        env: Dict[str, Union[str, int, float, bool]] = {}
        script: Optional[str] = None
        train_args: Optional[Union[List[Union[str, int, float]], str]] = None
        directives: Union[List[str], str] = []
        workdir: Optional[str] = None
        venv: Optional[str] = None
        conda: Optional[str] = None
        hosts: Optional[Union[List[str], str]] = None
        login: Optional[str] = None
        pass_env: List[str] = []
        notify: Optional[str] = None
        stop_before: Optional[Union[str, int]] = None
        chain: Optional[Annotated[int, msgspec.Meta(ge=1)]] = None
        gather: Optional[Annotated[int, msgspec.Meta(ge=1, le=65535)]] = None

    return ProjectConfig


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
    out: Dict[str, Any] = {}
    for key in data:
        value = getattr(cfg, key)
        if key == "train_args" and isinstance(value, str):
            import shlex

            try:
                value = shlex.split(value)
            except ValueError as exc:
                raise SpecError(f"{path}: key `train_args`: {exc}", hint="quote it as one shell word list") from None
        elif key == "train_args" and value is not None:
            value = [str(v) for v in value]
        elif key == "env":
            value = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in value.items()}
        elif key in ("modules", "hosts", "directives") and isinstance(value, str):
            value = [value]
        elif key in ("walltime", "stop_before") and value is not None:
            value = str(value)
        out[key] = value
    return out


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
