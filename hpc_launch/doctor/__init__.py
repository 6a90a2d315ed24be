"""`hpc-launch doctor`: the cause and the fix of a failed job, one line each, from its log, the
scheduler's comment, its exit code and its state.

Pure functions over text: nothing here imports torch or DeepSpeed (it runs on a laptop). Every
pattern is the failing program's own wording, taken from its source or its real output; the
fixtures in tests/golden/doctor/ (README there) are those messages as the programs print them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from .causes import CAUSES, Cause, Facts

__all__ = ["CAUSES", "Cause", "Diagnosis", "Facts", "Finding", "diagnose", "report_lines", "summary_lines"]


_OPTIONAL = re.compile(r"\[\[(.*?)\]\]")  # a [[segment]] of a template is dropped when a field in it is missing

# Lines worth showing when nothing known matched; loggers' routine INFO/WARNING lines are not.
_ERRORISH = re.compile(
    r"(?i)\b(error|exception|traceback|fatal|failed|failure|killed|denied|refused|timed out|not found"
    r"|no such file|abort(ed)?|segmentation fault)\b"
)
_ROUTINE = re.compile(r"\[(INFO|WARNING|DEBUG)\]|^\[hpc-train\]|^\[hpc-launch\] notify:")
# hpc-launch's own lines in the log (its job script, its notify's report of a webhook it could not
# reach): only a cause written for them reads them, never one matching a program's words
_OWN_LINE = re.compile(r"^\[hpc-launch\] .*$", re.M)
_OWN_WORDS = r"\[hpc-launch\]"
_EVIDENCE_CHARS = 220
# What a terminal would act on rather than show (ESC starts a colour or moves the cursor, BEL
# rings, C1 and bidi controls reorder) in the log text doctor prints: shown as \x1b, \u202e.
_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _visible(text: str) -> str:
    return _CONTROL.sub(lambda m: ascii(m.group())[1:-1], text)


@dataclass(frozen=True)
class Finding:
    cause: Cause
    text: str  # the cause line
    fix: str
    evidence: str  # the log line (or the scheduler's word) that shows it
    line_no: Optional[int]  # 1-based line of the log; None when it came from the scheduler or the exit status
    strong: bool


@dataclass(frozen=True)
class Diagnosis:
    findings: Tuple[Finding, ...]  # best first
    tail: Tuple[Tuple[int, str], ...] = ()  # the log's last error-like lines, for an unrecognised failure
    facts: Facts = Facts()

    @property
    def found(self) -> bool:
        return bool(self.findings)

    @property
    def top(self) -> Optional[Finding]:
        return self.findings[0] if self.findings else None

    @property
    def succeeded(self) -> bool:
        return not self.findings and self.facts.state == "done" and self.facts.exit_code in (0, None)


def diagnose(log_text: str, *, exit_code: Optional[int] = None, comment: str = "", state=None) -> Diagnosis:
    """What went wrong, from the job's log, the scheduler's comment (JobRecord.comment), its exit
    code and its state (a JobState or its word)."""
    facts = Facts(exit_code=exit_code, state=getattr(state, "value", state), comment=(comment or "").strip())
    text = log_text.replace("\r\n", "\n")
    programs = _OWN_LINE.sub("", text)  # the same lines, numbered alike, hpc-launch's own ones empty
    strong: List[Finding] = []
    weak: List[Finding] = []
    ended_well = facts.exit_code == 0 or facts.state == "done"
    for cause in CAUSES:
        if cause.fallback and (ended_well or strong):
            continue
        said = cause.signal(facts) if cause.signal else None
        unscheduled = _search(cause.unscheduled_patterns, text, programs, facts)
        hit = unscheduled or _search(cause.patterns, text, programs, facts)
        if hit:
            strong.append(_finding(cause, *hit, strong=True, unscheduled=unscheduled is not None))
        elif said and not cause.signal_weak:
            strong.append(_finding(cause, {}, said, None, strong=True))
        elif facts.cancelled:
            continue  # a cancel explains a kill signal
        elif hit := _search(cause.weak, text, programs, facts):
            weak.append(_finding(cause, *hit, strong=False))
        elif said:
            weak.append(_finding(cause, {}, said, None, strong=False))
    findings: List[Finding] = []
    for f in strong + weak:
        if f.line_no is None or all(f.line_no != g.line_no for g in findings):  # one line, one cause
            findings.append(f)
    tail = () if findings else tuple(_errorish_tail(text.split("\n")))
    return Diagnosis(tuple(findings), tail, facts)


def _search(patterns: Sequence[str], full: str, programs: str, facts: Facts):
    """The first pattern (in the cause's order) that matches: its groups, the evidence line, its
    number. The log comes first, from the top (the first rank to fail says it first), then the
    scheduler's comment. A pattern of hpc-launch's own words reads `full`, any other `programs`
    (the log without hpc-launch's own lines: its notify's `Connection refused` is not a rank's)."""
    for pattern in patterns:
        rx = re.compile(pattern, re.M)
        text = full if _OWN_WORDS in pattern else programs
        m = rx.search(text)
        if m:
            start = text.rfind("\n", 0, m.start()) + 1
            end = text.find("\n", m.start())
            line = text[start : end if end >= 0 else len(text)]
            return m.groupdict(), _clip(line, m.start() - start), text.count("\n", 0, start) + 1
        m = rx.search(facts.comment) if facts.comment else None
        if m:
            return m.groupdict(), f"scheduler: {facts.comment}", None
    return None


def _clip(line: str, at: int) -> str:
    """The evidence: the piece of the line holding the match (progress bars rewrite a line with
    \\r), at most a screen wide."""
    start = line.rfind("\r", 0, at) + 1
    end = line.find("\r", at)
    piece = line[start : end if end >= 0 else len(line)].strip()
    return piece if len(piece) <= _EVIDENCE_CHARS else piece[: _EVIDENCE_CHARS - 3] + "..."


def _finding(
    cause: Cause,
    groups: Dict[str, Optional[str]],
    evidence: str,
    line_no: Optional[int],
    *,
    strong: bool,
    unscheduled: bool = False,
) -> Finding:
    values = {k: _visible(v.strip()) for k, v in groups.items() if v}
    if {"micro", "accum", "world"} <= values.keys():
        values["want"] = str(int(values["micro"]) * int(values["accum"]) * int(values["world"]))
    text = cause.cause if strong or not cause.weak_cause else cause.weak_cause
    fix = cause.fix
    if unscheduled:  # hpc-launch's own words where no scheduler runs the job: it, not a scheduler, ended it
        text, fix = cause.unscheduled_cause, cause.unscheduled_fix
    return Finding(cause, _fill(text, values), _fill(fix, values), _visible(evidence), line_no, strong)


def _fill(template: str, values: Dict[str, str]) -> str:
    def optional(m: re.Match) -> str:
        names = re.findall(r"\{(\w+)\}", m.group(1))
        return m.group(1).format(**values) if all(n in values for n in names) else ""

    text = _OPTIONAL.sub(optional, template)
    return re.sub(r"\{(\w+)\}", lambda m: values.get(m.group(1), "?"), text)


def _errorish_tail(lines: List[str], n: int = 3) -> List[Tuple[int, str]]:
    picked = [i for i, line in enumerate(lines) if _ERRORISH.search(line) and not _ROUTINE.search(line)]
    if not picked:
        picked = [i for i, line in enumerate(lines) if line.strip()]
    return [(i + 1, _visible(_clip(lines[i], 0))) for i in picked[-n:]]


def _where(f: Finding) -> str:
    return f"line {f.line_no}: {f.evidence}" if f.line_no is not None else f.evidence


def _also(d: Diagnosis) -> str:
    return "; ".join(
        f"{f.cause.title} ({'line ' + str(f.line_no) if f.line_no else 'scheduler'})" for f in d.findings[1:]
    )


def report_lines(d: Diagnosis) -> List[str]:
    """`hpc-launch doctor`'s output: cause, fix, evidence (with its line number), also seen."""
    if d.succeeded:
        return [
            "cause: nothing failed: the job ended done"
            + (f" with exit code {d.facts.exit_code}" if d.facts.exit_code is not None else "")
        ]
    if not d.findings:
        return (
            [
                "cause: not recognised: none of the failures doctor knows "
                "(docs/commands.md#doctor) shows in the log or the scheduler's word"
            ]
            + [f"evidence: line {n}: {text}" for n, text in d.tail]
            + ["fix: unknown; start from the evidence lines above, in the log itself"]
        )
    top = d.findings[0]
    out = [f"cause: {top.text}", f"fix: {top.fix}", f"evidence: {_where(top)}"]
    if len(d.findings) > 1:
        out.append(f"also seen: {_also(d)}")
    return out


def summary_lines(d: Diagnosis) -> List[str]:
    """The same, for the end-of-job summary block (labels in its 10-wide column)."""
    if d.succeeded:
        return []
    if not d.findings:
        return ["cause     not recognised by doctor: the log's last error lines are"] + [
            f"evidence  line {n}: {text}" for n, text in d.tail
        ]
    top = d.findings[0]
    out = [f"cause     {top.text}", f"fix       {top.fix}", f"evidence  {_where(top)}"]
    if len(d.findings) > 1:
        out.append(f"also seen {_also(d)}")
    return out
