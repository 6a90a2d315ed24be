"""What every scheduler dialect provides: build-command / parse-output pairs, all pure functions.

A dialect never runs anything: `submit.py` and `tracker.py` run its argv through a transport.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Sequence

from ..errors import SchedulerError
from ..states import JobState


@dataclass(frozen=True)
class StatusInfo:
    state: JobState
    exit_code: Optional[int] = None
    raw: str = ""  # the scheduler's own word, for `status` output
    # The scheduler says the job is over but not how it ended (Torque-style `C` without an
    # exit status): the exit-code file decides.
    ended: bool = False

    @property
    def active(self) -> bool:
        return not (self.ended or self.state.terminal)


# Messages that mean "the scheduler did not take the job, try again later" (nothing was created).
TRANSIENT_PATTERNS = [
    r"cannot connect to server",
    r"connection refused",
    r"connection timed out",
    r"socket timed out",
    r"unable to contact slurm controller",
    r"resource temporarily unavailable",
    r"unable to contact qmaster",
    r"commlib error",
    r"try again",
]


class Dialect:
    name: str = ""
    directive_prefix: str = ""
    submit_program: str = ""
    # Shell expressions, valid inside the job, for the job id and its numeric part.
    job_id_expr: str = ""
    job_num_expr: str = ""
    # How to get the job's node list in plain shell when `hpc-launch hostfile` is not on the node.
    nodelist_shell: str = ""
    status_needs_history_fallback = False

    # ---- directives ----------------------------------------------------------------------
    def directive_key(self, text: str) -> str:
        """The part of a directive that identifies it, so a user line replaces a default one."""
        tokens = text.split()
        if not tokens:
            return ""
        head = tokens[0]
        if head.startswith("--") and "=" in head:
            return head.split("=", 1)[0]
        if len(tokens) > 1 and head in ("-l", "-W", "-v", "--attrs"):
            return f"{head} {re.split(r'[=:]', tokens[1], 1)[0]}"
        return head

    def merge_directives(self, defaults: Sequence[str], overrides: Sequence[str]) -> List[str]:
        """Defaults with user lines replacing same-key ones in place; new keys appended.

        PBS Pro honours the FIRST of two conflicting directives, so appending a user line after
        a default would silently lose it: we never emit two lines with the same key.
        """
        out = list(defaults)
        for line in overrides:
            key = self.directive_key(line)
            for i, existing in enumerate(out):
                if self.directive_key(existing) == key:
                    out[i] = line
                    break
            else:
                out.append(line)
        return out

    # ---- submit ----------------------------------------------------------------------------
    def submit_argv(self, script_path: str, *, submit_flags: Sequence[str] = (), program: Optional[Sequence[str]] = None) -> List[str]:
        return list(program or [self.submit_program]) + list(submit_flags) + [script_path]

    def parse_submit(self, out: str) -> str:
        raise NotImplementedError

    def is_transient(self, err: str) -> bool:
        low = err.lower()
        return any(re.search(p, low) for p in TRANSIENT_PATTERNS)

    # ---- status / cancel -------------------------------------------------------------------
    def status_argv(self, job_ids: Sequence[str], *, history: bool = True) -> List[str]:
        raise NotImplementedError

    def parse_status(self, out: str, job_ids: Iterable[str]) -> Dict[str, StatusInfo]:
        """Jobs the scheduler still knows; a job missing from the result has left the scheduler."""
        raise NotImplementedError

    def cancel_argv(self, job_id: str) -> List[str]:
        raise NotImplementedError

    # ---- names -----------------------------------------------------------------------------
    def job_num(self, job_id: str) -> str:
        """The numeric part used in log names (12345 for 12345.pbs1)."""
        return job_id.split(".", 1)[0]


def with_site_commands(argv: Sequence[str], commands: Dict[str, str]) -> List[str]:
    """Swap the scheduler program for the site's name of it (the first argv item it names)."""
    out = list(argv)
    for i, item in enumerate(out):
        if item in commands:
            out[i] = commands[item]
            break
    return out


def last_matching_line(out: str, pattern: str, what: str) -> re.Match:
    for line in reversed(out.strip().splitlines()):
        m = re.search(pattern, line.strip())
        if m:
            return m
    shown = out.strip().replace("\n", " | ")[:200] or "(nothing)"
    raise SchedulerError(f"could not find the job id in the {what} output: {shown}", hint="the submit may have failed; check `hpc-launch list` before retrying")
