"""The causes `hpc-launch doctor` knows (doctor/__init__.py reads logs with them): for each, the
failing program's own words (taken from its source or its real output: tests/golden/doctor/, README
there), the cause and the fix as one line each, and where the words come from. The most specific first.
"""

from __future__ import annotations

from typing import Tuple

from .cause import Cause, Facts, scheduler_words, unscheduled_words
from .causes_run import RUN
from .causes_setup import SETUP

__all__ = ["CAUSES", "Cause", "Facts", "scheduler_words", "unscheduled_words"]

# The table, most specific first: the first cause that matches is the one shown; a weak match
# (a bare SIGKILL, a refused connection) ranks below every strong one.
CAUSES: Tuple[Cause, ...] = SETUP + RUN
