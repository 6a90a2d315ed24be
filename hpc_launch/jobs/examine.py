"""`hpc-launch doctor TARGET`: doctor's diagnosis (hpc_launch/doctor.py) of a log file or of a recorded
job, refreshed first so the scheduler's word is evidence too."""

from __future__ import annotations

import os
from typing import Any, Callable, Optional

from ..doctor import Diagnosis, diagnose
from ..protocol import exit_path_for, parse_exit_file
from ..records import JobStore
from ..states import JobState
from .logfile import log_text_or_empty
from .state import refresh


def examine(target: str, cluster: Optional[str] = None, *, on_note: Callable[[str], Any] = lambda s: None) -> Diagnosis:
    """A log file (its exit-code file beside it says how it ended) or a recorded job."""
    if os.path.isfile(target):
        with open(target, encoding="utf-8", errors="replace") as f:
            text = f.read()
        try:
            with open(exit_path_for(target), encoding="utf-8", errors="replace") as f:
                code = parse_exit_file(f.read())
        except OSError:
            code = None
        return diagnose(text, exit_code=code)
    store = JobStore()
    record = refresh(store, [store.get(target, cluster)])[0]
    if not JobState(record.state).terminal:
        on_note(f"job {record.job_id} is still {record.state}: this is what its log shows so far")
    # a job that never started (a refusal, `Can Never Run`) has no log: the scheduler's word is the evidence
    return diagnose(log_text_or_empty(record), exit_code=record.exit_code, comment=record.comment, state=record.state)
