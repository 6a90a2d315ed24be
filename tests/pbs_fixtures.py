"""Real PBS Professional outputs (tests/golden/pbspro-observed/, one command per file) and a fake
`run(argv)` that replays them, for driving `PBSPro.query()` without a PBS server."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

from hpc_launch.transport import CommandResult

OBSERVED = Path(__file__).parent / "golden" / "pbspro-observed"
SCHED = Path(__file__).parent / "golden" / "sched"


@dataclass(frozen=True)
class Fixture:
    name: str  # file stem, e.g. "014-qstat-f-never-runs"
    command: str  # exactly as typed (without the /opt/pbs/bin prefix)
    run_as: str
    rc: int
    notes: Tuple[str, ...]
    out: str
    err: str

    @property
    def program(self) -> str:
        return shlex.split(self.command)[0]

    @property
    def argv(self) -> List[str]:
        return shlex.split(self.command)

    @property
    def result(self) -> CommandResult:
        return CommandResult(self.rc, self.out, self.err)


def parse(text: str, name: str = "") -> Fixture:
    head, sep, body = text.partition("--- stdout ---\n")
    assert sep, f"{name}: no stdout section"
    parts = re.split(r"(?m)^--- stderr ---\n", body, maxsplit=1)
    assert len(parts) == 2, f"{name}: no stderr section"
    fields: Dict[str, str] = {}
    notes: List[str] = []
    for line in head.splitlines():
        key, _, value = line.partition(": ")
        if key == "note":
            notes.append(value)
        else:
            fields[key] = value
    return Fixture(
        name=name,
        command=fields["command"],
        run_as=fields["run as"],
        rc=int(fields["exit code"]),
        notes=tuple(notes),
        out=parts[0],
        err=parts[1],
    )


def load(name: str) -> Fixture:
    """By number ("014"), stem or file name."""
    matches = (
        sorted(OBSERVED.glob(f"{name}*.txt"))
        if re.fullmatch(r"\d{3}", name)
        else [OBSERVED / (name if name.endswith(".txt") else name + ".txt")]
    )
    assert len(matches) == 1 and matches[0].exists(), f"no single fixture for {name!r}"
    return parse(matches[0].read_text(), matches[0].stem)


def all_fixtures() -> List[Fixture]:
    return [parse(p.read_text(), p.stem) for p in sorted(OBSERVED.glob("[0-9][0-9][0-9]-*.txt"))]


def normalize(argv: Sequence[str]) -> Tuple[str, frozenset, Tuple[str, ...]]:
    """(program, flags, operands): `qstat -fx ID` and `qstat -f -x ID` are the same query."""
    flags = set()
    operands: List[str] = []
    items = list(argv[1:])
    while items:
        item = items.pop(0)
        if item in ("-F", "-W", "-u"):  # options that take a value
            flags.add(f"{item} {items.pop(0)}")
        elif re.fullmatch(r"-[A-Za-z]+", item):
            flags.update(f"-{c}" for c in item[1:])
        else:
            operands.append(item)
    return argv[0], frozenset(flags), tuple(operands)


@dataclass
class Replay:
    """A `run(argv)` answering from recorded outputs; any other command fails the test."""

    answers: Dict[tuple, CommandResult] = field(default_factory=dict)
    calls: List[List[str]] = field(default_factory=list)

    @classmethod
    def of(cls, *fixtures: Fixture) -> "Replay":
        replay = cls()
        for fx in fixtures:
            replay.add(fx.argv, fx.result)
        return replay

    def add(self, argv: Sequence[str], result: CommandResult) -> "Replay":
        self.answers[normalize(argv)] = result
        return self

    def __call__(self, argv: List[str]) -> CommandResult:
        self.calls.append(list(argv))
        key = normalize(argv)
        if key not in self.answers:
            raise AssertionError(
                f"no recorded answer for {shlex.join(argv)}; recorded: "
                + "; ".join(f"{p} {' '.join(sorted(f))} {' '.join(o)}" for p, f, o in self.answers)
            )
        return self.answers[key]


def sched(name: str) -> str:
    """A recording of the testbed's Slurm PBS wrappers (tests/golden/sched)."""
    return (SCHED / name).read_text()
