"""`submit` between parsing and the exit code, without typer: the typer command
(cli/submit_cmds.py) and the fast path (cli/fast.py) both call `read_submit`, so a dry-run is the
same code whichever parsed its command line."""

from __future__ import annotations

import sys
from typing import Any, Callable, Dict, Iterable, Optional

from .. import options
from ..protocol import EXIT_SIGINT
from .option_values import PARSERS, OptionError
from .printing import say


def job_values(command: str, v: Dict[str, Any], leave_out: Iterable[str] = ()) -> Dict[str, Any]:
    """The command's job options as typed (`v`: its parameters by name) -> JobSpec values, each by
    its row's parser (hpc_launch/options.py): the one place where the lists, hostlists,
    NAME=VALUE pairs and the shell-quoted training arguments are parsed. A bad one raises
    OptionError, before anything is read or written."""
    out: Dict[str, Any] = {}
    for row in options.of(command):
        if row.field and row.field not in leave_out:
            out[row.field] = PARSERS[row.parse](v[row.name]) if row.parse else v[row.name]
    return out


def show_dry_run(prepared) -> None:
    """--dry-run: the script on stdout, where it would go and the submit command on stderr."""
    sys.stdout.write(prepared.script.text)
    sys.stdout.flush()
    sys.stderr.write(f"# script: {prepared.script_path}\n{prepared.submit_display()}\n")


class Announcer:
    """Prints a submitted job's id the moment it is recorded (before Ctrl-C is let through), and
    says what is true when Ctrl-C comes: nothing submitted, or which job keeps running."""

    def __init__(self) -> None:
        self.records: list = []

    def __call__(self, record) -> None:
        self.records.append(record)
        extra = record.extra or {}
        if extra.get("link", 1) > 1:  # a later --chain link: named on stderr; stdout keeps the chain's one id
            sys.stderr.write(
                f"chain link {extra['link']} of {extra['links']}: {record.job_id} (starts when "
                f"{self.records[-2].job_id} has ended); log: {record.log_path}\n"
            )
            return
        print(record.job_id, flush=True)
        links = f" (chain link 1 of {extra['links']})" if extra.get("links", 1) > 1 else ""
        sys.stderr.write(
            f"submitted {record.name} as {record.job_id}{links} on {record.cluster}; log: {record.log_path}\n"
        )

    def interrupted(self) -> int:
        """Say what Ctrl-C left behind; the exit code."""
        if not self.records:
            say("interrupted before the job was submitted: nothing was submitted or recorded")
        else:
            job = self.records[0].job_id
            every = " ".join(r.job_id for r in self.records)  # each link: cancelling one lets the next start
            one = len(self.records) == 1
            what = f"job {job} was" if one else f"jobs {every} (a chain's links) were"
            stop = f"hpc-launch cancel {job}" if one else f"hpc-launch cancel ID, for each of {every}"
            say(
                f"interrupted after {what} submitted and recorded: it keeps running. "
                f"Follow it: hpc-launch logs -f {job}   Stop it: {stop}"
            )
        return EXIT_SIGINT


def read_submit(v: Dict[str, Any]) -> Callable[[], int]:
    """`v`: the submit command's parameters by name, as typer passes them. Checks the options
    (OptionError) and returns the submit itself, which returns the exit code."""
    values = job_values("submit", v)
    values["stage_env"] = stage_choice(v["stage_env"], v["stage_data"], v["no_stage"])
    return lambda: submit(v, values)


def stage_choice(stage_env: bool, stage_data: Optional[str], no_stage: bool) -> Optional[bool]:
    """--stage-env: True; --no-stage: False; neither: None (the profile's `stage:` decides)."""
    if no_stage and (stage_env or stage_data is not None):
        raise OptionError("--no-stage with --stage-env or --stage-data: choose one", param_hint="--no-stage")
    return True if stage_env else (False if no_stage else None)


def submit(v: Dict[str, Any], options: Dict[str, Any]) -> int:
    from ..prepare import prepare
    from ..project_config import spec_for

    spec = spec_for(v["config"], options)
    prepared = prepare(spec, profile_file=v["profile"], note=say)
    if v["dry_run"]:
        show_dry_run(prepared)
        return 0
    from ..jobs import submit as submit_job

    announce = Announcer()
    try:
        record = submit_job(prepared, on_recorded=announce, check=not v["no_check"])
    except KeyboardInterrupt:
        return announce.interrupted()
    if v["follow"]:
        from ..follow import follow_chain

        return follow_chain(record, show_all=v["show_all"])
    return 0
