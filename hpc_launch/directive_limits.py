"""A user's --directive that sets what the profile writes from a checked option.

`-d '-l walltime=999:00:00'` must not slip past the queue's walltime limit: a directive whose key
(the dialect's `directive_keys`) matches one of the profile's directives carrying {walltime},
{queue}, {nodes} or {gpus_per_node} is read back through that directive into the option, so
resolve checks it as if the option had been given; another form is refused, naming the option.
"""

from __future__ import annotations

import re
from typing import Any, Dict, Optional

from .errors import SpecError
from .site.profiles import Profile
from .walltime import parse_walltime

# Placeholders a profile's directive carries that hpc-launch checks against the site's limits,
# and the option that sets each: a --directive setting one goes through the option's checks.
_CHECKED = {
    "walltime": "--walltime",
    "walltime_minutes": "--walltime",
    "queue": "--queue",
    "nodes": "--nodes",
    "gpus_per_node": "--gpus-per-node",
}


def directive_options(spec: Any, p: Profile, dialect: Any) -> Dict[str, Any]:
    """A --directive that sets what one of the profile's directives writes from a checked option
    (`-l walltime=`, `--nodes=`, `-q`; known by the dialect's directive key) is read back through
    that directive into the option, so the option's limits apply to it; one that cannot be read
    back (another form, several resources on one line) is refused, naming the option."""
    queues = [q for q in [*p.queues, spec.queue, p.default_queue] if q]
    found: Dict[str, Any] = {}
    for line in spec.directives:
        keys = set(dialect.directive_keys(line))
        for template in p.directives:
            names = re.findall(r"{(\w+)}", template)
            checked = [n for n in names if n in _CHECKED]
            if not checked:
                continue
            # a key may hold a value (Grid Engine's `-l {queue}={nodes}`): try each queue's
            filled = {k for q in queues or ["queue"] for k in dialect.directive_keys(_with_queue(template, q))}
            if not keys & filled:
                continue
            options = " and ".join(dict.fromkeys(_CHECKED[n] for n in checked))
            values = _read_back(template, line) if set(names) <= set(_CHECKED) else None
            if values is None:
                raise SpecError(
                    f"--directive {line!r} sets what hpc-launch writes from {options} "
                    f"and checks against {p.name}'s limits",
                    hint=f"use {options} instead",
                )
            for name, value in values.items():
                field_name = "walltime" if name == "walltime_minutes" else name
                value = _option_value(name, value, line)
                given = found.get(field_name, getattr(spec, field_name))
                if given is not None and not _same(field_name, given, value):
                    raise SpecError(
                        f"--directive {line!r} and {_CHECKED[name]} {given} ask for different things",
                        hint=f"give it once, with {_CHECKED[name]}",
                    )
                found[field_name] = value
    return found


def _with_queue(template: str, queue: str) -> str:
    return re.sub(r"{(\w+)}", lambda m: queue if m.group(1) == "queue" else "1", template)


def _read_back(template: str, line: str) -> Optional[Dict[str, str]]:
    """The placeholders' values in `line` written in the form of `template`; None: another form."""
    names = re.findall(r"{(\w+)}", template)
    pieces = re.split(r"{\w+}", " ".join(template.split()))
    m = re.fullmatch(r"([^\s,]+?)".join(re.escape(piece) for piece in pieces), " ".join(line.split()))
    if not m:
        return None
    values: Dict[str, str] = {}
    for name, value in zip(names, m.groups()):
        if values.setdefault(name, value) != value:
            return None
    return values


def _option_value(name: str, value: str, line: str) -> Any:
    if name in ("walltime", "walltime_minutes"):
        if name == "walltime_minutes" and value.isdigit():
            value = f"{value}m"  # Cobalt's -t takes minutes or HH:MM:SS
        try:
            parse_walltime(value)
        except ValueError as exc:
            raise SpecError(f"--directive {line!r}: {exc}", hint="use --walltime") from None
        return value
    if name in ("nodes", "gpus_per_node"):
        if not value.isdigit():
            raise SpecError(f"--directive {line!r}: {value!r} is not a whole number", hint=f"use {_CHECKED[name]} N")
        return int(value)
    return value


def _same(field_name: str, a: Any, b: Any) -> bool:
    if field_name == "walltime":
        try:
            return parse_walltime(str(a)) == parse_walltime(str(b))
        except ValueError:
            return False
    return a == b
