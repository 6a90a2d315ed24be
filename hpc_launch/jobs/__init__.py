"""A job's life, one small module per part; the face and the sweep call these, nothing else.

  connect     transport_for(host): the one place that opens a transport (the face never does)
  placing     writing a job's files, running the submit command once, the record
  submission  submit() one job (and its chain's links), adopt() one that has no record
  groups      chains, job arrays, sweeps: which jobs an id names
  state       who decides a job's state, refresh(), a follower's state_poller()
  cancel      cancel() a job, cancel_group() a sweep's or an array's jobs
  logfile     a job's whole log and its capsule, wherever it ran
  rerun       rerun() a job's training from its capsule on another site (or the same)
  where       where() the same job would start on each of several clusters, before submitting
  first_start one training submitted to several clusters: the first to start trains, the others are cancelled
  examine     examine() a job or a log file with doctor (`hpc-launch doctor`)

Data flows one way: prepare.Prepared -> submission -> placing -> records; state and cancel read
records and ask the scheduler through the record's dialect.
"""

from __future__ import annotations

from .cancel import CancelResult, cancel, cancel_group, cancel_ident
from .examine import examine
from .connect import TransportFor, transport_for
from .logfile import array_tasks, capsule_of, log_text_or_empty, read_whole_log
from .groups import chain_links, find_jobs, group_members, lookup, recorded, submit_array
from .placing import NotRecorded, record_for, run_submit, signals_held
from .state import (
    NeverRuns,
    Outcome,
    exit_hint,
    poll_for,
    query,
    refresh,
    refresh_is_cheap,
    state_from_exit_code,
    state_poller,
)
from .rerun import RerunUI, rerun
from .submission import adopt, submit
from .where import Where, where, where_line

__all__ = [
    "CancelResult",
    "cancel",
    "cancel_group",
    "cancel_ident",
    "examine",
    "TransportFor",
    "transport_for",
    "chain_links",
    "find_jobs",
    "group_members",
    "lookup",
    "recorded",
    "submit_array",
    "NotRecorded",
    "record_for",
    "run_submit",
    "signals_held",
    "NeverRuns",
    "Outcome",
    "exit_hint",
    "poll_for",
    "query",
    "refresh",
    "refresh_is_cheap",
    "state_from_exit_code",
    "state_poller",
    "adopt",
    "submit",
    "capsule_of",
    "log_text_or_empty",
    "read_whole_log",
    "array_tasks",
    "RerunUI",
    "rerun",
    "Where",
    "where",
    "where_line",
]
