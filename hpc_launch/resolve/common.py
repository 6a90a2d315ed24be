"""What several rules share: the token checks and the limits no site goes beyond."""

from __future__ import annotations

import re

from ..errors import SpecError

NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,62}$")
# queue, group, module names, hosts; never a leading '-' (it would read as an option: `-P -x`)
TOKEN = re.compile(r"^[A-Za-z0-9_.@%+][A-Za-z0-9_.@%+:/=-]*$")
ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
CONTROL = re.compile(r"[\x00-\x1f\x7f]")

MAX_SPARES = 64
# Each link is a job waiting in the queue from the start; sites cap a user's queued jobs far below
# this (Slurm MaxSubmitJobs, PBS max_queued), and a thousand walltimes is years of training.
MAX_CHAIN = 1000
# Longer than any site's queue allows (ABCI's longest: 168 h); beyond it is a typo (`--walltime
# 9999h`), and Slurm reads a huge minute count as its INFINITE/NO_VAL markers. Longer runs: --chain.
MAX_WALLTIME_S = 365 * 86400


def check_token(value: str, what: str, fix: str) -> str:
    if not TOKEN.match(value):
        raise SpecError(f"{what} {value!r} has characters a scheduler cannot take", hint=fix)
    return value
