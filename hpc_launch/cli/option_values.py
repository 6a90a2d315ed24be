"""Option values as typed -> Python values, without typer: the `submit`/`hostfile` fast path
(hpc_launch/cli/fast.py) and the typer commands both call these. A bad value raises OptionError,
which the typer commands turn into typer's usage error and the fast path answers by handing the
command line to typer, so the message is typer's either way."""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional


class OptionError(ValueError):
    """A value an option cannot take: `message` as typer's BadParameter would say it, for `param_hint`."""

    def __init__(self, message: str, param_hint: str) -> None:
        super().__init__(message)
        self.message = message
        self.param_hint = param_hint


def parse_env(pairs: Optional[List[str]]) -> Dict[str, str]:
    env = {}
    for pair in pairs or []:
        if "=" not in pair:
            raise OptionError(f"{pair!r} is not NAME=VALUE", param_hint="--env")
        key, value = pair.split("=", 1)
        env[key] = value
    return env


def split_list(value: Optional[str]) -> Optional[List[str]]:
    if value is None:
        return None
    return [v for v in (x.strip() for x in value.split(",")) if v]


def split_args(value: Optional[str]) -> Optional[List[str]]:
    if value is None:
        return None
    import shlex

    try:
        return shlex.split(value)
    except ValueError as exc:  # "No closing quotation"
        raise OptionError(
            f"{exc} in {value!r}: quote it as one shell word list, e.g. --train-args \"--note 'a b'\"",
            param_hint="--train-args",
        ) from None


def expand_hosts(value: Optional[str]) -> Optional[List[str]]:
    if value is None:
        return None
    from ..nodelist import expand_slurm_nodelist

    return expand_slurm_nodelist(value)


def preflight_off(off: bool) -> Optional[bool]:
    """--no-preflight: False; not given: None (the default, a gate)."""
    return False if off else None


# the option table's `parse` names (hpc_launch/options.py) -> the function that reads the text
PARSERS: Dict[str, Callable[[Any], Any]] = {
    "split_list": split_list,
    "parse_env": parse_env,
    "split_args": split_args,
    "expand_hosts": expand_hosts,
    "list": list,
    "off": preflight_off,
}
