"""A sweep's grid: each axis's values from a flag or a sweep file (`--grid`), checked; the points
they make (combinations that are no configuration left out and said so); a point's training flags."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any, Callable, Dict, List, Sequence, Tuple

from .errors import SpecError
from .plan import AXES, FLAGS, entry_choices, label, undefined

_FILE_KEYS = {"micro-batch": "micro_batch", "micro_batches": "micro_batch", "stage": "zero"}


def axis_values(axis: str, raw: Any, where: str) -> List[Any]:
    """One axis's values from a flag (`0,1,2`) or a YAML value (a list or one value), checked."""
    items = (
        raw if isinstance(raw, list) else [v.strip() for v in str(raw).split(",")] if isinstance(raw, str) else [raw]
    )
    items = [v for v in items if v != ""]
    if not items:
        raise SpecError(
            f"{where}: no values", hint=f"give one or more, comma-separated, e.g. {FLAGS.get(axis, '--nodes')} 1,2"
        )
    out: List[Any] = []
    for item in items:
        if axis in ("zero", "nodes", "micro_batch"):
            text = str(item).strip()
            if isinstance(item, bool) or not text.isdigit():
                raise SpecError(f"{where}: {item!r} is not a whole number", hint="give whole numbers, comma-separated")
            value: Any = int(text)
            if axis == "zero" and value not in entry_choices()["zero"]:
                raise SpecError(f"{where}: ZeRO stage {value} does not exist", hint="ZeRO stages are 0, 1, 2, 3")
            if axis != "zero" and value < 1:
                raise SpecError(f"{where}: {value} must be at least 1")
        else:
            value = str(item).strip()
            if value not in entry_choices()[axis]:
                raise SpecError(f"{where}: {value!r} is not one of {', '.join(entry_choices()[axis])}")
        if value in out:  # the same point twice would run twice and count twice in the report
            raise SpecError(f"{where}: {value} is given twice", hint="give each value once")
        out.append(value)
    return out


def load_grid_file(path: str) -> Tuple[Dict[str, List[Any]], List[Dict[str, Any]]]:
    """A sweep file: axes (a list or one value each; their product is the grid) and/or `points:`,
    a list of single points added to it.

        zero: [0, 1, 2, 3]
        offload: none
        points:
          - {zero: 3, offload: optimizer}
    """
    import yaml

    from .paths import load_yaml, read_user_file

    try:
        data = load_yaml(read_user_file(Path(path))) or {}
    except OSError as exc:
        raise SpecError(f"--grid {path}: {exc.strerror or exc}", hint="give the path of a YAML sweep file") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise SpecError(f"--grid {path}: not valid YAML ({getattr(exc, 'problem', None) or exc})") from None
    if not isinstance(data, dict):
        raise SpecError(f"--grid {path}: must be a YAML mapping of axes ({', '.join(AXES)}) and/or points:")
    axes: Dict[str, List[Any]] = {}
    points: List[Dict[str, Any]] = []
    for key, value in data.items():
        name = _FILE_KEYS.get(str(key), str(key))
        if name == "points":
            if not isinstance(value, list) or not all(isinstance(p, dict) for p in value):
                raise SpecError(
                    f"--grid {path}: `points:` must be a list of mappings like {{zero: 3, offload: optimizer}}"
                )
            for i, p in enumerate(value, 1):
                point = {}
                for k, v in p.items():
                    axis = _FILE_KEYS.get(str(k), str(k))
                    if axis not in AXES:
                        raise SpecError(f"--grid {path}: point {i}: unknown key {k!r}", hint=f"keys: {', '.join(AXES)}")
                    vals = axis_values(axis, v, f"--grid {path}: point {i}: {axis}")
                    if len(vals) != 1:
                        raise SpecError(f"--grid {path}: point {i}: {axis} must be one value, not a list")
                    point[axis] = vals[0]
                points.append(point)
        elif name in AXES:
            axes[name] = axis_values(name, value, f"--grid {path}: {name}")
        else:
            raise SpecError(f"--grid {path}: unknown key {key!r}", hint=f"keys: {', '.join(AXES)}, points")
    return axes, points


def expand(
    axes: Dict[str, List[Any]], points: Sequence[Dict[str, Any]] = (), note: Callable[[str], Any] = lambda s: None
) -> List[Dict[str, Any]]:
    """The grid's points: the product of the axes (combinations that are no configuration, like
    ZeRO-0 with offload, are left out and said so), then the listed points (taking the axes' single
    values where they name none). A point given twice is refused."""
    out: List[Dict[str, Any]] = []
    names = [a for a in AXES if a in axes]
    if names and (not points or any(len(axes[a]) > 1 for a in names)):
        for combo in itertools.product(*(axes[a] for a in names)):
            point = dict(zip(names, combo))
            why = undefined(point)
            if why:
                note(f"left out {label(point)}: {why}")
                continue
            if point not in out:
                out.append(point)
    for i, given in enumerate(points, 1):
        point = {a: axes[a][0] for a in names if len(axes[a]) == 1}
        point.update(given)
        point = {a: point[a] for a in AXES if a in point}
        why = undefined(point)
        if why:
            raise SpecError(f"sweep point {i} ({label(point)}): {why}", hint="change or remove that point")
        if point in out:
            raise SpecError(
                f"sweep point {i} ({label(point)}) is already in the sweep",
                hint="remove it from points:, or drop its values from the axes",
            )
        out.append(point)
    if not out:
        raise SpecError("the sweep has no points", hint="give at least one axis, e.g. --zero 0,1,2,3, or a --grid file")
    return out


def with_point(args: Sequence[str], point: Dict[str, Any]) -> List[str]:
    """The training arguments with the point's flags in place of the same flags in `args`."""
    drop = {FLAGS[a] for a in point if a in FLAGS}
    out: List[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg in drop:
            skip = True
            continue
        if arg.split("=", 1)[0] in drop and "=" in arg:
            continue
        out.append(arg)
    for axis in AXES:
        if axis in point and axis in FLAGS:
            out += [FLAGS[axis], str(point[axis])]
    return out
