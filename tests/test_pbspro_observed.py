"""Every recording of a real PBS Professional server (tests/golden/pbspro-observed: OpenPBS
23.06.06, one command per file; RECORDING.md there lists the behaviours) is one test case
asserting what the PBS dialect makes of it. Then scenarios drive `PBSPro.query()` with a `run`
that replays the recordings per argv: history on, off and purged; running, finished, failed,
cancelled, walltime-killed, never-runs and array jobs.

Where a scenario needs a command that was not recorded in exactly that form, the answer is
composed from recordings and says so (`alias`, `composed`), with the reason it is equivalent.
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Callable, Dict, Optional

import pytest

from hpc_launch import dialects
from hpc_launch.dialects.pbspro import is_array, kill_reason, parse_full, parse_table, variable_list
from hpc_launch.errors import SchedulerError
from hpc_launch.states import JobState
from hpc_launch.jobs import run_submit as _run_submit
from hpc_launch.transport import CommandResult
from fakes import FakeTransport
from pbs_fixtures import Fixture, Replay, all_fixtures, load

D = dialects.get("pbspro")
QUEUED, RUNNING, DONE, FAILED = JobState.QUEUED, JobState.RUNNING, JobState.DONE, JobState.FAILED
CANCELLED, TIMEOUT, UNKNOWN = JobState.CANCELLED, JobState.TIMEOUT, JobState.UNKNOWN
REPO = Path(__file__).resolve().parents[1]

FIXTURES = all_fixtures()
CHECKS: Dict[str, Callable[[Fixture], None]] = {}


def case(*numbers: str):
    def register(fn):
        for n in numbers:
            assert n not in CHECKS, f"{n} has two cases"
            CHECKS[n] = fn
        return fn

    return register


def job(fx: Fixture, job_id: str) -> Dict[str, str]:
    return dict(parse_full(fx.out))[job_id]


# ---- qsub: accepted ------------------------------------------------------------------------


def submit(fx: Fixture):
    """The real submit path (retry policy included) fed this recording."""
    transport = FakeTransport(lambda argv: fx.result, host="pbshead")
    try:
        return _run_submit(transport, ["qsub"], "/home/pbsuser/work", D, sleep=lambda s: None)
    finally:
        assert len(transport.ran) == 1, "a refusal or an id must never cause a second qsub"


QSUB_ACCEPTED = {
    "001": "51.pbshead",
    "002": "52.pbshead",
    "003": "53.pbshead",
    "006": "58.pbshead",
    "007": "59[].pbshead",
    "008": "60[].pbshead",
    "013": "65.pbshead",
    "017": "67.pbshead",
    "020": "69.pbshead",
    "027": "76.pbshead",
    "028": "77.pbshead",
    "031": "79.pbshead",
    "032": "81.pbshead",
    "033": "83[].pbshead",
    "093": "95.pbshead",
    "103": "96.pbshead",
    "104": "97.pbshead",
    "105": "98.pbshead",
    "112": "99.pbshead",
    "115": "100.pbshead",
    "116": "101.pbshead",
    "117": "102.pbshead",
    "118": "103.pbshead",
    "119": "104.pbshead",
    "141": "105.pbshead",
    "158": "108.pbshead",
    "161": "110.pbshead",
    "164": "112.pbshead",
    "170": "113.pbshead",
    "182": "115.pbshead",
    "185": "116.pbshead",
    "189": "119.pbshead",
    "190": "120.pbshead",
}


@case(*QSUB_ACCEPTED)
def check_qsub_accepted(fx: Fixture):
    expected = QSUB_ACCEPTED[fx.name[:3]]
    assert submit(fx) == expected
    assert D.parse_submit(fx.out) == expected
    # arrays (`-J 1-3`, `-J 1-5:2`) answer `N[].server`; their logs are per subjob (157)
    assert is_array(expected) == (" -J " in fx.command)
    assert D.job_num(expected) == re.match(r"\d+", expected).group()


@case("030")
def check_qsub_block_true(fx: Fixture):
    # `-W block=true`: qsub prints the id, waits, and exits with the JOB's status (3). A
    # non-zero rc is then not a refusal: hpc-launch never passes block=true.
    assert fx.rc == 3 and D.parse_submit(fx.out) == "78.pbshead"
    assert not any("block" in flag for flag in D.submit_flags("x"))


# ---- qsub: refused (stderr only, nothing created, never retried) ---------------------------

QSUB_REFUSED = {
    "004": "qsub: Bad GID for job execution",
    "005": "qsub: Bad GID for job execution",
    "009": "qsub: Unknown queue",
    "010": "qsub: Unknown resource Resource_List.foo",
    "011": "qsub: Unknown resource: foo",
    "012": "qsub: Job violates queue and/or server resource limits",
    "016": "qsub: Job violates queue and/or server resource limits",
    "019": "qsub: Queue is not enabled",
    "022": "qsub: script file:: No such file or directory",
    "023": "qsub: Illegal attribute or resource value Resource_List.walltime",
    "024": "qsub: illegal -J value",  # the usage text that follows is not repeated
    "025": "qsub: Array job exceeds server or queue size limit",
    "026": 'qsub: "-lresource=" cannot be used with "select" or "place", resource is: system',
    "187": "qsub: Unknown resource Resource_List.foo",
}


@case(*QSUB_REFUSED)
def check_qsub_refused(fx: Fixture):
    assert fx.rc != 0 and fx.out == ""
    with pytest.raises(SchedulerError) as err:
        submit(fx)
    assert str(err.value) == f"qsub refused the job: {QSUB_REFUSED[fx.name[:3]]}"
    assert not D.is_transient(fx.err)
    with pytest.raises(SchedulerError, match="could not find the job id"):
        D.parse_submit(fx.out)


# ---- qstat -f (text): the status of each job -----------------------------------------------


def expect(
    state: JobState,
    code: Optional[int] = None,
    *,
    raw: str = "",
    comment: Optional[str] = None,
    never: bool = False,
    ended: bool = False,
):
    return dict(state=state, code=code, raw=raw, comment=comment, never=never, ended=ended)


QSTAT_F = {
    "014": {
        "65.pbshead": expect(QUEUED, raw="Q", never=True, comment="Can Never Run: Not enough total nodes available")
    },
    # the wrap fell mid-number: "A: 3" + TAB + "2 T: 32)"
    "018": {
        "67.pbshead": expect(
            QUEUED,
            raw="Q",
            never=True,
            comment="Can Never Run: Insufficient amount of resource: ncpus (R: 64 A: 32 T: 32)",
        )
    },
    "021": {"69.pbshead": expect(QUEUED, raw="Q", comment="Not Running: Queue not started.")},
    "029": {
        "77.pbshead": expect(
            FAILED, raw="F", comment="never ran: dependency afterok:99999.pbshead@pbshead not satisfied"
        )
    },
    "038": {"82[].pbshead": expect(RUNNING, raw="B", comment="Job Array Began at Sun Nov 22 at 22:25")},
    "040": {"82[1].pbshead": expect(RUNNING, raw="R", comment="Job run at Sun Nov 22 at 22:25 on (pbshead:ncpus=1)")},
    "042": {"80.pbshead": expect(RUNNING, raw="R", comment="Job run at Sun Nov 22 at 22:25 on (pbshead:ncpus=1)")},
    "045": {"81.pbshead": expect(QUEUED, raw="H", comment="")},
    "046": {"83[].pbshead": expect(QUEUED, raw="H", comment="")},
    # the wrap fell right after a space: "A: 28 " + TAB + "T: 32)"
    "048": {
        "84.pbshead": expect(
            QUEUED, raw="Q", comment="Not Running: Insufficient amount of resource: ncpus (R: 32 A: 28 T: 32)"
        )
    },
    "049": {
        "85.pbshead": expect(
            TIMEOUT,
            -29,
            raw="F",
            comment="Job run at Sun Nov 22 at 22:26 on (pbshead:ncpus=1) and exceeded resource walltime",
        )
    },
    "051": {
        "88.pbshead": expect(
            FAILED, 1, raw="F", comment="Job run at Sun Nov 22 at 22:26 on (pbshead:ncpus=1) and failed"
        )
    },
    "053": {
        "51.pbshead": expect(
            DONE, 0, raw="F", comment="Job run at Sun Nov 22 at 22:23 on (pbshead:ncpus=1) and finished"
        )
    },
    "057": {
        "78.pbshead": expect(
            FAILED, 3, raw="F", comment="Job run at Sun Nov 22 at 22:25 on (pbshead:ncpus=1) and failed"
        )
    },
    # qdel is asynchronous: still R 8 s later, the comment already says so
    "060": {
        "89.pbshead": expect(
            RUNNING,
            raw="R",
            comment="Job run at Sun Nov 22 at 22:26 on (pbshead:ncpus=1) and terminated by pbsuser@pbshead",
        )
    },
    "062": {
        "84.pbshead": expect(
            CANCELLED,
            raw="F",
            comment="Not Running: Insufficient amount of resource: ncpus (R: 32 A: 25 T: 32) and terminated",
        )
    },
    "067": {
        "89.pbshead": expect(
            CANCELLED,
            271,
            raw="F",
            comment="Job run at Sun Nov 22 at 22:26 on (pbshead:ncpus=1) and terminated by pbsuser@pbshead",
        )
    },
    # an array parent's Exit_status is not its subjobs' (0 here, 0 with a failed subjob in 072, 1 after qdel in 078)
    "069": {"82[].pbshead": expect(DONE, None, raw="F", comment="Job Array Began at Sun Nov 22 at 22:25 and finished")},
    "070": {"82[1].pbshead": expect(DONE, 0, raw="F")},
    "072": {"90[].pbshead": expect(FAILED, None, raw="F", comment="Job Array Began at Sun Nov 22 at 22:27 and failed")},
    "073": {"90[2].pbshead": expect(FAILED, 3, raw="F")},
    "078": {
        "91[].pbshead": expect(
            CANCELLED, None, raw="F", comment="Job Array Began at Sun Nov 22 at 22:27 and terminated"
        )
    },
    "079": {"91[2].pbshead": expect(CANCELLED, 271, raw="F")},
    "080": {"86.pbshead": expect(RUNNING, raw="R")},  # over its mem limit, not enforced here
    "083": {
        "86.pbshead": expect(
            CANCELLED,
            265,
            raw="F",
            comment=(
                "Job run at Sun Nov 22 at 22:26 on (pbshead:ncpus=1:mem=102400kb) and terminated by pbsuser@pbshead"
            ),
        )
    },
    "084": {"94.pbshead": expect(RUNNING, raw="E")},  # Exit_status is set already, but E is not an end
    "086": {"78.pbshead": expect(FAILED, 3, raw="F"), "80.pbshead": expect(RUNNING, raw="R")},
    "094": {"95.pbshead": expect(RUNNING, raw="R")},
    "095": {"95.pbshead": expect(RUNNING, raw="R")},
    "107": {
        "96.pbshead": expect(
            DONE,
            0,
            raw="F",
            comment="Job run at Sun Nov 22 at 22:30 on (pbshead:ncpus=1)+(pbsmom2:ncpus=1) and finished",
        )
    },
    "109": {"97.pbshead": expect(DONE, 0, raw="F")},
    "111": {"98.pbshead": expect(DONE, 0, raw="F")},
    "113": {"99.pbshead": expect(DONE, 0, raw="F")},
    "122": {"100.pbshead": expect(RUNNING, raw="R")},
    "123": {"104.pbshead": expect(RUNNING, raw="R")},
    "127": {"104.pbshead": expect(DONE, 0, raw="F")},
    "145": {"80.pbshead": expect(RUNNING, raw="R")},  # history off: without -x a live job answers normally
    "159": {"108.pbshead": expect(RUNNING, raw="R")},  # substate 41: just started
    "162": {"110.pbshead": expect(RUNNING, raw="R", comment="Job run at Sun Nov 22 at 22:33 on (pbshead:ncpus=1)")},
    "165": {"112.pbshead": expect(QUEUED, raw="H", comment="")},  # dependency hold (substate 22)
    "168": {
        "112.pbshead": expect(
            FAILED, raw="F", comment="never ran: dependency afterok:111.pbshead@pbshead not satisfied"
        )
    },
    "183": {"115.pbshead": expect(DONE, 0, raw="F")},
    "184": {"115.pbshead": expect(DONE, 0, raw="F")},  # a manager sees more attributes, same verdict
    "186": {"116.pbshead": expect(DONE, 0, raw="F")},
}


@case(*QSTAT_F)
def check_qstat_f(fx: Fixture):
    wanted = QSTAT_F[fx.name[:3]]
    ids = list(wanted) + (["99999.pbshead"] if "99999" in fx.command else [])
    got = D.parse_status(fx.out, ids)
    assert set(got) == set(wanted)  # 99999 (unknown, rc 153) is absent: it left the scheduler
    for job_id, e in wanted.items():
        info = got[job_id]
        assert (info.state, info.exit_code, info.raw, info.never_runs, info.ended) == (
            e["state"],
            e["code"],
            e["raw"],
            e["never"],
            e["ended"],
        ), job_id
        assert info.active == (e["state"] in (QUEUED, RUNNING)), job_id
        if e["comment"] is not None:
            assert info.comment == e["comment"], job_id
    EXTRA.get(fx.name[:3], lambda fx: None)(fx)


def _variable_list_has_secret(fx: Fixture):
    # with query_other_jobs = True (the default) any user reads values passed with -v (issue 7 C)
    assert variable_list(job(fx, "95.pbshead")["Variable_List"])["SECRET_NAME"] == "xyz"
    assert fx.run_as.startswith("user (pbs")


def _wraps_and_escapes(fx: Fixture):
    got = variable_list(job(fx, "108.pbshead")["Variable_List"])
    assert (got["A"], got["B"], got["C"]) == ("1", "x,y", "has space")  # `B=x\,y` in the text
    assert got["PBS_O_PATH"] == "/opt/pbs/bin:/usr/local/bin:/usr/bin:/bin:/usr/local/games:/usr/games:/opt/pbs/bin"


def _raw_newline(fx: Fixture):
    attrs = job(fx, "110.pbshead")
    got = variable_list(attrs["Variable_List"])
    assert got["BASH_FUNC_myfunc%%"] == '() {  echo "quoted \\"x\\""\n}'  # the function qsub -V copied
    assert got["_"] == "/opt/pbs/bin/qsub" and got["PBS_O_HOST"] == "pbshead"
    assert (
        got["PATH"] == "/opt/pbs/bin:/usr/local/bin:/usr/bin:/bin:/usr/local/games:/usr/games:/opt/pbs/bin"
    )  # wrapped mid-word
    assert attrs["comment"].startswith("Job run at") and attrs["run_count"] == "1"  # nothing after it was lost


def _tab_only_line(fx: Fixture):
    # a value ending exactly at the wrap column is followed by a line holding only a TAB
    assert job(fx, "112.pbshead")["Submit_arguments"] == "-q rt_HF -N child -W depend=afterok:111.pbshead hello.sh"


def _packed_chunks(fx: Fixture):
    # place=free put both chunks of select=2 on one host (issue 7 B2); scatter did not (107)
    attrs = job(fx, "97.pbshead")
    assert attrs["exec_host"] == "pbshead/3+pbshead/4" and attrs["Resource_List.nodect"] == "2"
    assert attrs["Resource_List.place"] == "free"


def _scattered_chunks(fx: Fixture):
    attrs = job(fx, "96.pbshead")
    assert attrs["exec_host"] == "pbshead/2+pbsmom2/0" and attrs["Resource_List.place"] == "scatter"


def _manager_view(fx: Fixture):
    attrs = job(fx, "115.pbshead")
    assert attrs["euser"] == "pbsuser" and attrs["egroup"] == "gx00"
    assert "euser" not in job(load("183"), "115.pbshead")


EXTRA = {
    "094": _variable_list_has_secret,
    "095": _variable_list_has_secret,
    "159": _wraps_and_escapes,
    "162": _raw_newline,
    "165": _tab_only_line,
    "109": _packed_chunks,
    "107": _scattered_chunks,
    "184": _manager_view,
}


# ---- qstat tables: parsed by the header's columns -------------------------------------------

LETTER_STATE = {"Q": QUEUED, "H": QUEUED, "R": RUNNING, "B": RUNNING, "E": RUNNING}

QSTAT_TABLE = {
    "034": {
        "65.pbshead": "Q",
        "67.pbshead": "Q",
        "80.pbshead": "R",
        "81.pbshead": "H",
        "82[].pbshead": "B",
        "83[].pbshead": "H",
        "84.pbshead": "Q",
    },
    "035": {
        "65.pbshead": "Q",
        "67.pbshead": "Q",
        "80.pbshead": "R",
        "81.pbshead": "H",
        "82[].pbshead": "B",
        "82[1].pbshead": "R",
        "82[2].pbshead": "R",
        "82[3].pbshead": "R",
        "83[].pbshead": "H",
        "83[1].pbshead": "Q",
        "83[2].pbshead": "Q",
        "83[3].pbshead": "Q",
        "84.pbshead": "Q",
    },
    "036": {"82[].pbshead": "B", "83[].pbshead": "H"},
    "037": {
        "65.pbshead": "Q",
        "67.pbshead": "Q",
        "80.pbshead": "R",
        "81.pbshead": "H",
        "82[].pbshead": "B",
        "83[].pbshead": "H",
        "84.pbshead": "Q",
    },
    "041": {"82[].pbshead": "B", "82[1].pbshead": "R", "82[2].pbshead": "R", "82[3].pbshead": "R"},
    "044": {"80.pbshead": "R"},
    "047": {"83[].pbshead": "H", "83[1].pbshead": "Q", "83[2].pbshead": "Q", "83[3].pbshead": "Q"},
    "054": {"51.pbshead": "F"},
    "066": {"83[].pbshead": "F", "83[1].pbshead": "F", "83[2].pbshead": "F", "83[3].pbshead": "F"},
    "068": {"82[].pbshead": "F", "82[1].pbshead": "F", "82[2].pbshead": "F", "82[3].pbshead": "F"},
    "077": {"91[].pbshead": "F", "91[1].pbshead": "F", "91[2].pbshead": "F", "91[3].pbshead": "F"},
    "085": {"94.pbshead": "E"},
    "087": {"78.pbshead": "F", "80.pbshead": "R"},  # rc 153 for 99999, the known jobs still listed
    "097": {"65.pbshead": "Q", "67.pbshead": "Q", "80.pbshead": "R", "81.pbshead": "H", "95.pbshead": "R"},
    "100": {},  # query_other_jobs = False: another user's jobs are silently left out, rc 0
    "151": {"106.pbshead": "F"},
    "166": {"111.pbshead": "H", "112.pbshead": "H"},
    "169": {"111.pbshead": "F", "112.pbshead": "F"},
    "171": {"113.pbshead": "R"},  # name cut to `a_very_long_job*`
    "172": {"113.pbshead": "R"},  # -w: cut to 15 characters
    "173": {"113.pbshead": "R"},  # asked as `113`, answered as `113.pbshead`
    "174": {"114[].pbshead": "F", "114[1].pbshead": "F", "114[2].pbshead": "F"},
    "175": {"114[2].pbshead": "F"},
    "180": {"65.pbshead": "F", "67.pbshead": "F"},  # deleted while queued (179)
    "191": {"119.pbshead": "F", "120.pbshead": "F"},
}


@case(*QSTAT_TABLE)
def check_qstat_table(fx: Fixture):
    wanted = QSTAT_TABLE[fx.name[:3]]
    rows = parse_table(fx.out)
    assert {j: letter for j, (letter, _) in rows.items()} == wanted
    short = [re.sub(r"\.pbshead$", "", j) for j in wanted]  # ids as given without the suffix match too
    got = D.parse_status(fx.out, short)
    for j, letter in zip(short, wanted.values()):
        if letter == "F":  # a table has no exit status: the exit-code file decides
            assert got[j].ended and not got[j].active
        else:
            assert got[j].state == LETTER_STATE[letter] and got[j].active
    if fx.name.startswith("037"):  # -answ1 -s puts the comment on its own line
        assert got["65"].never_runs and got["65"].comment == "Can Never Run: Not enough total nodes available"
        assert got["81"].comment == "" and not got["84"].never_runs


# ---- qstat answers with no job on stdout -----------------------------------------------------


@case("055", "056", "071")
def check_finished_without_x(fx: Fixture):
    # history on, no -x: rc 35 "Job has finished": the job left the live list, not an error
    assert fx.rc == 35 and fx.out == "" and "Job has finished" in fx.err
    assert D.is_unknown_job_error(fx.err) and not D.history_unavailable(fx.rc, fx.out, fx.err)
    assert "-x" in D.status_argv(["51.pbshead"])  # which is why we always ask with -x first


HISTORY_OFF = ("137", "138", "139", "140", "142", "147")


@case(*HISTORY_OFF)
def check_history_off(fx: Fixture):
    # job_history_enable = False: rc 0, nothing on stdout (JSON: no "Jobs"), even for running jobs
    assert fx.rc == 0 and "not configured to maintain job history" in fx.err
    assert D.history_unavailable(fx.rc, fx.out, fx.err)
    assert D.parse_status(fx.out, ["80.pbshead", "65.pbshead", "78.pbshead", "105.pbshead"]) == {}
    if "json" in fx.command:
        assert "Jobs" not in json.loads(fx.out)


@case("089", "143", "144", "149", "152", "153", "156", "176", "177")
def check_unknown_job(fx: Fixture):
    # purged (history duration, qdel -x, history switched off) or never existed: rc 153, gone
    assert fx.rc == 153 and fx.out == "" and re.fullmatch(r"qstat: Unknown Job Id \S+\n", fx.err)
    assert D.is_unknown_job_error(fx.err) and not D.history_unavailable(fx.rc, fx.out, fx.err)
    if fx.name.startswith("176"):  # an array asked by its bare number is unknown: keep the brackets
        assert D.parse_submit("114[].pbshead\n") == "114[].pbshead"


@case("134", "178")
def check_bad_operand(fx: Fixture):
    # a non-numeric operand is a queue: a real error, not "the job left"
    assert fx.rc == 170 and not D.is_unknown_job_error(fx.err)
    with pytest.raises(SchedulerError, match="Unknown queue"):
        D.query(Replay().add(D.status_argv(["abc"]), fx.result), ["abc"])


@case("092")
def check_conflicting_options(fx: Fixture):
    assert fx.rc == 2 and fx.err.startswith("qstat: conflicting options.")
    assert not D.history_unavailable(fx.rc, fx.out, fx.err)  # "conflicting options" is no missing -x
    assert "-F" not in D.status_argv(["1.s", "2.s"]) and "-u" not in D.status_argv(["1.s"])


@case("101")
def check_other_users_job_hidden(fx: Fixture):
    # query_other_jobs = False: nothing and rc 0 for someone else's job, not an error
    assert fx.rc == 0 and fx.out == fx.err == "" and fx.run_as.startswith("user (pbsother")
    assert D.parse_status(fx.out, ["95.pbshead"]) == {}


# ---- JSON: never asked for; used here as an oracle for the text parser ----------------------


def flatten(obj: dict, prefix: str = "") -> Dict[str, str]:
    out: Dict[str, str] = {}
    for k, v in obj.items():
        if isinstance(v, dict) and k != "Variable_List":
            out.update(flatten(v, f"{prefix}{k}."))
        elif k != "Variable_List":
            out[prefix + k] = str(v)
    return out


def same_as_text(json_fx: Fixture, text_fx: Fixture, job_id: str, kind: str = "Jobs"):
    """Every attribute JSON shows equals what the text parser rebuilt from the wrapped text."""
    data = json.loads(json_fx.out)[kind][job_id]
    text = dict(parse_full(text_fx.out, {"Jobs": "Job Id", "Queue": "Queue", "Server": "Server"}[kind]))[job_id]
    not_in_text = ("server_state", "server_host")  # -Bf -F json only
    flat = {k: v for k, v in flatten(data).items() if not k.startswith(not_in_text)}
    assert flat == {k: text[k] for k in flat}
    if "Variable_List" in data:  # JSON keeps \" and \\ escapes but not \, ones: compare unescaped
        ours = variable_list(text["Variable_List"])
        assert {k: re.sub(r"\\(.)", r"\1", str(v), flags=re.S) for k, v in data["Variable_List"].items()} == {
            k: ours[k] for k in data["Variable_List"]
        }
    return data


JSON_TWINS = {
    "015": ("014", "65.pbshead"),
    "039": ("038", "82[].pbshead"),
    "043": ("042", "80.pbshead"),
    "058": ("057", "78.pbshead"),
    "096": ("095", "95.pbshead"),
    "160": ("159", "108.pbshead"),
    "163": ("162", "110.pbshead"),
}


@case(*JSON_TWINS)
def check_json_twin(fx: Fixture):
    twin, job_id = JSON_TWINS[fx.name[:3]]
    data = same_as_text(fx, load(twin), job_id)
    assert D.parse_status(load(twin).out, [job_id])[job_id].raw == data["job_state"]


@case("088", "090")
def check_json_prints_only_the_first_job(fx: Fixture):
    # README item 6 (openpbs issue #2672): with several ids JSON shows the first job only;
    # text with the same ids (086) shows both. That is why status_argv asks for text.
    assert list(json.loads(fx.out)["Jobs"]) == ["78.pbshead"]
    assert set(D.parse_status(load("086").out, ["78.pbshead", "80.pbshead"])) == {"78.pbshead", "80.pbshead"}
    same_as_text(fx, load("086"), "78.pbshead")
    assert (fx.rc, "Unknown Job Id" in fx.err) == ((153, True) if "99999" in fx.command else (0, False))


@case("091")
def check_json_all_jobs(fx: Fixture):
    jobs = json.loads(fx.out)["Jobs"]
    assert list(jobs) == ["65.pbshead", "67.pbshead", "80.pbshead", "81.pbshead"]
    for job_id, twin in (("65.pbshead", "014"), ("67.pbshead", "018"), ("81.pbshead", "045")):
        assert D.parse_status(load(twin).out, [job_id])[job_id].raw == jobs[job_id]["job_state"]
    assert jobs["67.pbshead"]["comment"] == D.parse_status(load("018").out, ["67.pbshead"])["67.pbshead"].comment


# ---- queue and server attributes (context: what the site limits look like) -------------------


@case("128")
def check_queue_full(fx: Fixture):
    attrs = dict(parse_full(fx.out, "Queue"))["rt_HF"]
    assert attrs["resources_max.walltime"] == "168:00:00" and attrs["resources_default.walltime"] == "01:00:00"
    # wrapped right before ":0"; the trailing space is PBS's own (JSON has it too, 133)
    assert attrs["state_count"] == "Transit:0 Queued:2 Held:1 Waiting:0 Running:2 Exiting:0 Begun:0 "


@case("129")
def check_queue_json(fx: Fixture):
    data = json.loads(fx.out)["Queue"]["debug-g"]
    assert data["resources_max"]["walltime"] == "00:30:00"  # Miyabi's debug-g limit as set up here
    assert "debug-g            --      --    00:30:00" in load("131").out


@case("130")
def check_queue_table(fx: Fixture):
    rows = {line.split()[0]: line.split() for line in fx.out.splitlines()[2:]}
    assert rows["rt_HF"][2] == "5" and parse_table(fx.out) == {}  # a queue table has no job state column


@case("131")
def check_queue_limits_table(fx: Fixture):
    rows = {
        line.split()[0]: line.split()
        for line in fx.out.splitlines()
        if line[:1].isalpha() and not line.startswith("Queue")
    }
    assert rows["rt_HF"][3] == "168:00:0"  # cut to 8 characters: read limits from -Qf, never from -q
    assert rows["debug"][4] == "2"  # max nodect


@case("132", "133")
def check_server_attributes(fx: Fixture):
    if "json" in fx.command:
        data = same_as_text(fx, load("132"), "pbshead", "Server")
    else:
        data = dict(parse_full(fx.out, "Server"))["pbshead"]
    assert data["job_history_enable"] == "True" and data["query_other_jobs"] == "True"


# ---- qdel ------------------------------------------------------------------------------------

QDEL = {
    "059": (True, False, ""),
    "061": (True, False, ""),
    "065": (True, False, ""),
    "074": (True, False, ""),
    "075": (True, False, ""),
    "081": (True, False, ""),
    "082": (True, False, ""),
    "155": (True, False, ""),
    "181": (True, False, ""),
    "063": (False, True, "qdel: Job has finished 51.pbshead"),  # rc 35, history on
    "064": (False, True, "qdel: Unknown Job Id 99999.pbshead"),  # rc 153
    "146": (False, True, "qdel: Unknown Job Id 105.pbshead"),  # finished, history off
    "179": (False, True, "qdel: Unknown Job Id 99999.pbshead"),  # the known ids were deleted (180)
    "098": (False, False, "qdel: Unauthorized Request 95.pbshead"),  # rc 159, someone else's job
}


@case(*QDEL)
def check_qdel(fx: Fixture):
    outcome = D.parse_cancel(fx.rc, fx.out, fx.err)
    assert (outcome.sent, outcome.already_ended, outcome.message) == QDEL[fx.name[:3]]
    assert D.cancel_argv("89.pbshead") == ["qdel", "89.pbshead"]  # never -x (it would purge the record)


@case("167")
def check_qrls(fx: Fixture):
    # releasing the held afterok parent (which then exits 3): the child never runs (168)
    assert fx.rc == 0 and fx.command == "qrls 111.pbshead"
    assert D.parse_status(load("166").out, ["111.pbshead"])["111.pbshead"].state == QUEUED
    assert D.parse_status(load("168").out, ["112.pbshead"])["112.pbshead"].state == FAILED


# ---- qmgr: the server settings each group of recordings ran under ----------------------------


def history_off_window(fx: Fixture) -> bool:
    return 136 < int(fx.name[:3]) < 148


@case("136", "148")
def check_history_switch(fx: Fixture):
    qstat_x = [f for f in FIXTURES if re.search(r"\bqstat\b.*-(f?x|x)\b", f.command) and f.rc == 0]
    assert qstat_x and all(D.history_unavailable(f.rc, f.out, f.err) == history_off_window(f) for f in qstat_x)
    if fx.name.startswith("148"):
        assert dict(parse_full(fx.out, "Server"))["pbshead"]["job_history_enable"] == "True"


@case("150", "154")
def check_history_duration(fx: Fixture):
    # 10 s of history: 151 still shows F, 152 (25 s later) is Unknown: purged, absent from the answer
    assert D.parse_status(load("151").out, ["106.pbshead"])["106.pbshead"].ended
    assert D.query(Replay.of(load("152")), ["106.pbshead"]) == {}
    if fx.name.startswith("154"):
        assert dict(parse_full(fx.out, "Server"))["pbshead"]["job_history_duration"] == "24:00:00"


@case("135")
def check_server_list(fx: Fixture):
    attrs = dict(parse_full(fx.out, "Server"))["pbshead"]
    assert attrs["job_history_enable"] == "True" and attrs["max_array_size"] == "10000"


@case("099", "102")
def check_query_other_jobs(fx: Fixture):
    # while False (099 -> 102) the other user saw nothing (100, 101); True again afterwards
    assert parse_table(load("100").out) == {} and load("101").out == ""
    if fx.name.startswith("102"):
        assert dict(parse_full(fx.out, "Server"))["pbshead"]["query_other_jobs"] == "True"
    else:
        assert fx.command.endswith("query_other_jobs = False'")


# ---- inside the job: ids, log names, node files ----------------------------------------------


def env_of(fx: Fixture) -> Dict[str, str]:
    return dict(line.split("=", 1) for line in fx.out.split("--- cat")[0].splitlines() if "=" in line)


def nodefile_of(fx: Fixture) -> list:
    return fx.out.split("--- cat $PBS_NODEFILE ---\n", 1)[1].split("--- other ---", 1)[0].split()


def job_num_in_bash(env: Dict[str, str]) -> str:
    """Our job_num_expr, run by bash under `set -u` with the job's own variables."""
    script = f'set -u; JOB_NUM={D.job_num_expr}; printf %s "$JOB_NUM"'
    return subprocess.run(
        ["bash", "-c", script], env={"PATH": "/usr/bin:/bin", **env}, capture_output=True, text=True, check=True
    ).stdout


@case("076", "106", "108", "110", "114")
def check_job_env(fx: Fixture):
    env = env_of(fx)
    log = re.search(r"cat ([\w.]+)", fx.command).group(1)  # the scheduler's own log name
    name, num = re.fullmatch(r"(\w+)\.o(\S+)", log).groups()
    assert name == env["PBS_JOBNAME"]
    assert D.job_num(env["PBS_JOBID"]) == num  # 92[1].pbshead -> 92.1, as PBS names the log
    assert job_num_in_bash({k: v for k, v in env.items() if k.startswith("PBS_")}) == num
    nodes = nodefile_of(fx)
    with tempfile.NamedTemporaryFile("w", suffix=".nodes") as f:
        f.write("\n".join(nodes) + "\n")
        f.flush()
        source, hosts = D.nodes_from_env({"PBS_NODEFILE": f.name})
    assert source == "$PBS_NODEFILE"
    expected = {
        "076": {"pbshead": 1},
        "106": {"pbshead": 2, "pbsmom2": 2},
        "108": {"pbshead": 4},
        "110": {"pbshead": 4},
        "114": {"pbshead": 2, "pbsmom2": 2},
    }[fx.name[:3]]
    assert dict(hosts) == expected  # 108: place=free packed 2 chunks on 1 host (issue 7 B2)
    other = dict(re.findall(r"(?m)^(NCPUS|OMP_NUM_THREADS)=(\d+)$", fx.out))
    if fx.name.startswith("110"):  # ompthreads, not ncpus, sets NCPUS and OMP_NUM_THREADS
        assert (
            other == {"NCPUS": "2", "OMP_NUM_THREADS": "2"}
            and "ompthreads=2" in job(load("111"), "98.pbshead")["Resource_List.select"]
        )


@case("050")
def check_walltime_kill_line(fx: Fixture):
    info = kill_reason(fx.out)
    assert info.state == TIMEOUT and info.comment == "killed by PBS: walltime 12 exceeded limit 5"
    assert D.parse_status(load("049").out, ["85.pbshead"])["85.pbshead"].state == TIMEOUT  # the same job's record


@case("052")
def check_rlimit_failure(fx: Fixture):
    # pvmem is an rlimit: the program failed by itself (MemoryError, exit 1), PBS killed nothing
    assert "MemoryError" in fx.out and kill_reason(fx.out) is None
    assert D.parse_status(load("051").out, ["88.pbshead"])["88.pbshead"].state == FAILED


@case("157")
def check_array_log_names(fx: Fixture):
    names = {line.split()[-1] for line in fx.out.splitlines()}
    assert {f"arrfail.o{D.job_num(f'90[{i}].pbshead')}" for i in (1, 2, 3)} <= names
    assert {f"hello.sh.o{D.job_num(f'60[{i}].pbshead')}" for i in (1, 3, 5)} <= names  # -J 1-5:2
    assert f"arrfail.o{D.job_num('90[].pbshead')}" not in names  # the array itself has no log


@case("120", "124")
def check_output_files(fx: Fixture):
    names = {line.split()[-1] for line in fx.out.splitlines() if line.startswith("-")}

    def log(name, job_id):
        return f"/home/pbsuser/work/{name}.o{D.job_num(job_id)}"

    assert (
        log("keepoed", "100.pbshead") in names and log("keepdoe", "101.pbshead") in names
    )  # -k oed/doe: live at the final path
    assert log("keepoe", "102.pbshead") not in names  # -k oe: kept in $HOME on the execution host
    running = fx.name.startswith("120")
    assert (log("joinoe", "103.pbshead") in names) is not running  # spooled, copied at the end
    assert ("/var/spool/pbs/spool/103.pbshead.OU" in names) is running


@case("121", "125", "126")
def check_output_contents(fx: Fixture):
    lines = fx.out.splitlines()
    assert lines[:2] == ["line on stdout", "line on stderr"] or lines == [
        "line on stdout",
        "done",
        "===",
        "line on stderr",
    ]
    if "joinoe" in fx.command:  # -j oe (what submit_flags asks for): both streams in NAME.oNUM
        assert lines == ["line on stdout", "line on stderr", "done"] and ["-j", "oe"] == D.submit_flags("x")[2:]


@case("188")
def check_start_directory(fx: Fixture):
    got = dict(line.split("=", 1) for line in fx.out.splitlines())
    assert got["pwd"] == got["HOME"] != got["PBS_O_WORKDIR"]  # PBS starts the job in $HOME
    assert 'cd "$WORKDIR"' in (REPO / "templates/body/prologue.sh.j2").read_text()  # our script moves itself


@case("192")
def check_stdin_names(fx: Fixture):
    names = {line.split()[-1] for line in fx.out.splitlines() if line.startswith("-")}
    assert {f"STDIN.o{D.job_num('119.pbshead')}", f"STDIN.o{D.job_num('120.pbshead')}"} <= names
    assert fx.out.rstrip().endswith("from stdin\nhi")


# ---- one case per recording ------------------------------------------------------------------


def test_every_recording_has_a_case():
    assert sorted(CHECKS) == [fx.name[:3] for fx in FIXTURES] and len(FIXTURES) == 192


@pytest.mark.parametrize("fx", FIXTURES, ids=[fx.name for fx in FIXTURES])
def test_recording(fx: Fixture):
    CHECKS[fx.name[:3]](fx)


# =============================================================================================
# Scenarios: query() against a replayed server
# =============================================================================================


def alias(argv: list, fx: Fixture) -> Replay:
    """Answer `argv` with a recording of an equivalent command (see test_x_adds_nothing_for_a_live_job)."""
    return Replay().add(argv, fx.result)


def test_x_adds_nothing_for_a_live_job():
    # What justifies `alias`: for a job that has not finished, `qstat -f -x` (086, history on),
    # `qstat -f` (042, history on) and `qstat -f` (145, history off) print the same attributes
    # with the same values, except the clock.
    with_x, without, off = (job(load(n), "80.pbshead") for n in ("086", "042", "145"))
    assert set(with_x) == set(without) == set(off)
    moving = {"resources_used.walltime", "mtime"}
    assert {k: v for k, v in with_x.items() if k not in moving} == {k: v for k, v in without.items() if k not in moving}
    assert {k: v for k, v in off.items() if k not in moving} == {k: v for k, v in without.items() if k not in moving}


# ---- history on -----------------------------------------------------------------------------


def test_history_on_several_jobs_in_one_query_with_an_unknown_one():
    run = Replay.of(load("086"))
    got = D.query(run, ["78.pbshead", "99999.pbshead", "80.pbshead"])
    assert len(run.calls) == 1
    assert (got["78.pbshead"].state, got["78.pbshead"].exit_code) == (FAILED, 3)
    assert got["80.pbshead"].state == RUNNING
    assert "99999.pbshead" not in got  # rc 153 only means it left: the exit-code file decides


@pytest.mark.parametrize(
    "number,job_id,state,code",
    [
        ("053", "51.pbshead", DONE, 0),
        ("057", "78.pbshead", FAILED, 3),
        ("051", "88.pbshead", FAILED, 1),  # pvmem rlimit: the program failed by itself
        ("049", "85.pbshead", TIMEOUT, -29),  # walltime kill: not a cancel
        ("067", "89.pbshead", CANCELLED, 271),  # qdel of a running job
        ("083", "86.pbshead", CANCELLED, 265),  # qdel -W force
        ("062", "84.pbshead", CANCELLED, None),  # deleted while queued: never ran, not "done"
        ("029", "77.pbshead", FAILED, None),  # dependency on a job that never existed: never ran
        ("168", "112.pbshead", FAILED, None),  # afterok parent failed: never ran
        ("070", "82[1].pbshead", DONE, 0),  # a subjob tracked by itself
        ("073", "90[2].pbshead", FAILED, 3),
        ("079", "91[2].pbshead", CANCELLED, 271),
    ],
)
def test_history_on_finished(number, job_id, state, code):
    run = Replay.of(load(number))
    info = D.query(run, [job_id])[job_id]
    assert (info.state, info.exit_code, info.active) == (state, code, False)
    assert run.calls == [["qstat", "-f", "-x", job_id]]


def test_history_on_qdel_is_asynchronous():
    first = D.query(Replay.of(load("060")), ["89.pbshead"])["89.pbshead"]
    assert first.state == RUNNING and first.comment.endswith("terminated by pbsuser@pbshead")
    later = D.query(Replay.of(load("067")), ["89.pbshead"])["89.pbshead"]
    assert (later.state, later.exit_code) == (CANCELLED, 271)


@pytest.mark.parametrize(
    "number,job_id,never",
    [
        ("014", "65.pbshead", True),
        ("018", "67.pbshead", True),
        ("021", "69.pbshead", False),
        ("048", "84.pbshead", False),
    ],
)
def test_history_on_scheduler_reason(number, job_id, never):
    info = D.query(alias(D.status_argv([job_id]), load(number)), [job_id])[job_id]
    assert info.state == QUEUED and info.active and info.never_runs is never
    assert info.comment.startswith("Can Never Run:" if never else "Not Running:")


# ---- history off (PBS Pro's default) --------------------------------------------------------


def test_history_off_running_job_is_running():
    run = Replay.of(load("137"), load("145"))
    got = D.query(run, ["80.pbshead"])
    assert got["80.pbshead"].state == RUNNING and got["80.pbshead"].active
    assert run.calls == [["qstat", "-f", "-x", "80.pbshead"], ["qstat", "-f", "80.pbshead"]]


def test_history_off_job_that_can_never_run():
    run = Replay.of(load("138")).add(["qstat", "-f", "65.pbshead"], load("014").result)  # alias: a queued job
    info = D.query(run, ["65.pbshead"])["65.pbshead"]
    assert info.never_runs and info.comment == "Can Never Run: Not enough total nodes available"


@pytest.mark.parametrize("with_x,without,job_id", [("142", "143", "105.pbshead"), ("139", "144", "78.pbshead")])
def test_history_off_finished_job_left_the_answer(with_x, without, job_id):
    # finished during / before history off: Unknown Job Id without -x: absent, the exit-code file decides
    run = Replay.of(load(with_x), load(without))
    assert D.query(run, [job_id]) == {} and len(run.calls) == 2


def test_history_off_several_ids():
    # composed: history off prints the message per id (137, 142); without -x PBS lists the known
    # jobs and exits 153 for the unknown ones (086, 087)
    ids = ["80.pbshead", "105.pbshead"]
    run = Replay().add(D.status_argv(ids), CommandResult(0, "", load("137").err + load("142").err))
    run.add(["qstat", "-f"] + ids, CommandResult(153, load("145").out, load("143").err))
    got = D.query(run, ids)
    assert list(got) == ["80.pbshead"] and got["80.pbshead"].state == RUNNING


# ---- purged ---------------------------------------------------------------------------------


@pytest.mark.parametrize("number,job_id", [("152", "106.pbshead"), ("156", "107.pbshead"), ("149", "78.pbshead")])
def test_purged_job_is_absent_after_one_query(number, job_id):
    run = Replay.of(load(number))
    assert D.query(run, [job_id]) == {} and len(run.calls) == 1


def test_bad_operand_raises():
    run = alias(D.status_argv(["abc"]), load("178"))
    with pytest.raises(SchedulerError, match="qstat failed: qstat: Unknown queue destination abc"):
        D.query(run, ["abc"])


# ---- arrays ---------------------------------------------------------------------------------


def composed_t(*numbers: str) -> CommandResult:
    """`qstat -f -x -t N[]`: the parent's block, then each subjob's (as -f prints several jobs,
    086), composed from the single-job recordings."""
    return CommandResult(0, "".join(load(n).out for n in numbers), "")


def test_array_running_is_running_without_reading_subjobs():
    run = alias(D.status_argv(["82[].pbshead"]), load("038"))
    info = D.query(run, ["82[].pbshead"])["82[].pbshead"]
    assert (info.state, info.raw) == (RUNNING, "B") and len(run.calls) == 1


def test_held_array_is_queued():
    info = D.query(alias(D.status_argv(["83[].pbshead"]), load("046")), ["83[].pbshead"])["83[].pbshead"]
    assert (info.state, info.raw) == (QUEUED, "H")


def test_array_finished_ok():
    run = Replay.of(load("069")).add(["qstat", "-f", "-x", "-t", "82[].pbshead"], composed_t("069", "070"))
    info = D.query(run, ["82[].pbshead"])["82[].pbshead"]
    assert (info.state, info.exit_code) == (DONE, 0)
    assert run.calls[1] == ["qstat", "-f", "-x", "-t", "82[].pbshead"]


def test_array_with_a_failed_subjob_is_failed():
    # the parent says Exit_status 0 (072): only the subjobs tell
    run = Replay.of(load("072")).add(["qstat", "-f", "-x", "-t", "90[].pbshead"], composed_t("072", "073"))
    info = D.query(run, ["90[].pbshead"])["90[].pbshead"]
    assert (info.state, info.exit_code) == (FAILED, 3)
    assert "90[2].pbshead" in info.comment and "exit status 3" in info.comment


def test_array_deleted_while_running_is_cancelled():
    run = Replay.of(load("078")).add(["qstat", "-f", "-x", "-t", "91[].pbshead"], composed_t("078", "079"))
    info = D.query(run, ["91[].pbshead"])["91[].pbshead"]
    assert info.state == CANCELLED and "subjobs deleted" in info.comment


def test_array_without_subjob_records_keeps_the_parents_substate():
    # the subjobs' records unreadable (purged meanwhile): substate 93 still says one failed
    run = Replay.of(load("072")).add(["qstat", "-f", "-x", "-t", "90[].pbshead"], load("152").result)
    info = D.query(run, ["90[].pbshead"])["90[].pbshead"]
    assert (info.state, info.exit_code) == (FAILED, None)


# ---- states, exit statuses, kills ------------------------------------------------------------


def block(letter: str, **attrs: str) -> str:
    """042's running job with its state (and attributes) changed, for letters not recorded."""
    text = re.sub(r"job_state = R", f"job_state = {letter}", load("042").out)
    return text.replace(
        "    run_count = 1\n", "".join(f"    {k} = {v}\n" for k, v in attrs.items()) + "    run_count = 1\n"
    )


@pytest.mark.parametrize(
    "letter,state",
    [
        ("Q", QUEUED),
        ("H", QUEUED),
        ("W", QUEUED),
        ("T", QUEUED),
        ("S", QUEUED),
        ("U", QUEUED),
        ("M", QUEUED),
        ("R", RUNNING),
        ("E", RUNNING),
        ("B", RUNNING),
    ],
)
def test_every_live_letter_is_mapped(letter, state):
    info = D.parse_status(block(letter), ["80.pbshead"])["80.pbshead"]
    assert (info.state, info.active, info.raw) == (state, True, letter)


def test_moved_job_is_not_unknown_and_keeps_its_reason():
    # M: moved to another server (svr_jobfunc.c sets the comment); it runs there, it did not end
    text = block("M").replace(
        "comment = Job run at Sun Nov 22 at 22:25 on (pbshead:ncpus=1)", 'comment = Job has been moved to "workq@pbs2"'
    )
    info = D.parse_status(text, ["80.pbshead"])["80.pbshead"]
    assert info.state == QUEUED and info.active and info.comment == 'Job has been moved to "workq@pbs2"'


def test_an_unknown_letter_never_ends_a_job():
    info = D.parse_status(block("Z"), ["80.pbshead"])["80.pbshead"]
    assert info.state == UNKNOWN and info.active


def test_expired_subjob_resolves_like_finished():
    text = load("073").out.replace("job_state = F", "job_state = X")  # X: a subjob done while its array runs
    info = D.parse_status(text, ["90[2].pbshead"])["90[2].pbshead"]
    assert (info.state, info.exit_code) == (FAILED, 3)


@pytest.mark.parametrize(
    "code,state",
    [
        (0, DONE),
        (3, FAILED),
        (271, FAILED),  # a signal: a qdel only when the substate (91) says so, see job_info
        (265, FAILED),
        (-29, TIMEOUT),
        (-11, FAILED),  # JOB_EXEC_RERUN on F: a non-rerunnable job deleted on requeue; a rerun job is Q again
        (-27, FAILED),
        (-26, FAILED),
        (-28, FAILED),
        (-24, FAILED),  # mem, vmem, cput, ncpus kills: failures
        (143, FAILED),  # our script's TERM trap: jobs.py turns it into cancelled only when a cancel was asked
    ],
)
def test_exit_state(code, state):
    assert D.exit_state(code) == state


def test_rerun_job_is_queued_again_not_timed_out():
    # after a rerun the job is back in Q with the old Exit_status -11: the letter decides
    text = block("Q", Exit_status="-11")
    info = D.parse_status(text, ["80.pbshead"])["80.pbshead"]
    assert info.state == QUEUED and info.active


def test_resource_limit_kill_is_a_failure_not_a_cancel():
    # svr_jobfunc.c update_job_finish_comment: Exit_status -27 -> "... and exceeded resource mem"
    text = (
        load("049")
        .out.replace("Exit_status = -29", "Exit_status = -27")
        .replace("exceeded \n\tresource walltime", "exceeded \n\tresource mem")
    )
    info = D.parse_status(text, ["85.pbshead"])["85.pbshead"]
    assert (info.state, info.exit_code) == (FAILED, -27) and info.comment.endswith("exceeded resource mem")
    mem = kill_reason("line\n=>> PBS: job killed: mem 1048576kb exceeded limit 102400kb\n")  # mom_main.c format
    assert mem.state == FAILED and mem.comment == "killed by PBS: mem 1048576kb exceeded limit 102400kb"


def with_attrs(text: str, attrs: Dict[str, str]) -> str:
    """A recorded `qstat -f` block with attributes replaced (a wrapped value with all its lines)
    or, when absent, added."""
    for key, value in attrs.items():
        line = f"    {key} = {value}\n"
        text, n = re.subn(rf"(?m)^    {re.escape(key)} = .*\n(?:\t.*\n)*", lambda m, new=line: new, text)
        if not n:
            text = text.replace("    run_count = 1\n", line + "    run_count = 1\n")
    return text


RAN = "Job run at Sun Nov 22 at 22:26 on (pbshead:ncpus=1)"


@pytest.mark.parametrize(
    "number,job_id,attrs,state,why",
    [
        # a SIGTERM that no delete request sent (an admin's kill): svr_jobfunc.c gives 93, not 91
        ("067", "89.pbshead", {"substate": "93", "comment": f"{RAN} and failed"}, FAILED, "killed by SIGTERM"),
        # the cgroup hook's OOM kill of the whole job: SIGKILL, 93, its reason in diag_messages
        (
            "083",
            "86.pbshead",
            {
                "substate": "93",
                "comment": f"{RAN} and failed",
                "resources_used.diag_messages": '\'{"pbshead":"Cgroup mem limit exceeded"}\'',
            },
            FAILED,
            "killed by SIGKILL, not by qdel (pbshead: Cgroup mem limit exceeded)",
        ),
        # a limit named in the comment decides, whatever the exit status beside it
        ("067", "89.pbshead", {"substate": "93", "comment": f"{RAN} and exceeded resource mem"}, FAILED, "mem"),
        ("067", "89.pbshead", {"substate": "93", "comment": f"{RAN} and exceeded resource walltime"}, TIMEOUT, ""),
    ],
)
def test_a_signal_is_a_cancel_only_when_pbs_says_deleted(number, job_id, attrs, state, why):
    text = with_attrs(load(number).out, attrs)
    info = D.parse_status(text, [job_id])[job_id]
    assert (info.state, info.active) == (state, False) and why in info.comment
    # the recording itself (substate 91, "terminated by pbsuser@pbshead") stays a cancel
    assert D.parse_status(load(number).out, [job_id])[job_id].state == CANCELLED


def test_limit_kill_without_a_comment_is_read_from_the_exit_status():
    # update_job_finish_comment leaves the comment alone when none was set: -26 alone says vmem
    text = with_attrs(load("049").out, {"Exit_status": "-26", "comment": ""})
    info = D.parse_status(text, ["85.pbshead"])["85.pbshead"]
    assert (info.state, info.exit_code) == (FAILED, -26)


def without_attr(text: str, key: str) -> str:
    return re.sub(rf"(?m)^    {re.escape(key)} = .*\n(?:\t.*\n)*", "", text)


@pytest.mark.parametrize(
    "comment, state, why",
    [
        # no substate, no comment: nothing says a qdel sent the SIGTERM. Ended, and by a signal
        ("", FAILED, "killed by SIGTERM (Exit_status 271); PBS did not say whether a qdel sent it"),
        (f"{RAN} and failed", FAILED, "PBS did not say whether a qdel sent it"),
        # the server's comment for a delete request is enough without the substate
        (f"{RAN} and terminated by pbsuser@pbshead", CANCELLED, "terminated by pbsuser@pbshead"),
        # MoM's kill line as a site's qstat shows it in the comment: the resource is named
        (
            "job killed: vmem 25013551104 exceeded limit 24696061952",
            FAILED,
            "killed by PBS for exceeding its vmem limit (job killed: vmem 25013551104 exceeded limit 24696061952)",
        ),
        ("job killed: walltime 3725 exceeded limit 3600", TIMEOUT, "walltime"),
    ],
)
def test_a_finished_signal_kill_without_substate_is_terminal(comment, state, why):
    # 067 (qdel'd while running, F, Exit_status 271) with its substate gone and the comment replaced
    text = with_attrs(without_attr(load("067").out, "substate"), {"comment": comment})
    info = D.parse_status(text, ["89.pbshead"])["89.pbshead"]
    assert (info.state, info.active, info.exit_code) == (state, False, 271)
    assert why in info.comment


def test_subjob_reported_from_its_parent():
    # stat_job.c: a subjob whose own record is gone reads "Subjob failed|finished|terminated"
    for comment, state in (("Subjob failed", FAILED), ("Subjob finished", DONE), ("Subjob terminated", CANCELLED)):
        text = f"Job Id: 90[1].pbshead\n    job_state = F\n    comment = {comment}\n\n"
        assert D.parse_status(text, ["90[1].pbshead"])["90[1].pbshead"].state == state


# ---- submit output, names --------------------------------------------------------------------


@pytest.mark.parametrize(
    "out,expected",
    [
        ("51.pbshead\n", "51.pbshead"),
        ("Welcome to the login node\n51.pbshead\n", "51.pbshead"),  # a leading noise line
        ("51.pbshead\nqsub: WARNING: project not set\n", "51.pbshead"),  # a trailing one
        ("59[].pbshead\n", "59[].pbshead"),
        ("19\n", "19"),  # Slurm's qsub wrapper
    ],
)
def test_parse_submit_accepts(out, expected):
    assert D.parse_submit(out) == expected


@pytest.mark.parametrize(
    "out", ["", "qsub: Unknown queue\n", "10.0.0.1\n", "Job 51 submitted\n", "59[2].pbshead\n", "51.pbshead extra\n"]
)
def test_parse_submit_never_accepts_garbage(out):
    with pytest.raises(SchedulerError, match="could not find the job id"):
        D.parse_submit(out)


@pytest.mark.parametrize(
    "job_id,num",
    [
        ("51.pbshead", "51"),
        ("16[].pbshead", "16"),
        ("16[3].pbshead", "16.3"),
        ("21", "21"),
        ("349710.polaris-pbs-01.hsn.cm.polaris.alcf.anl.gov", "349710"),
    ],
)
def test_job_num_in_python_and_in_the_script_agree(job_id, num):
    assert D.job_num(job_id) == num
    env = {"PBS_JOBID": job_id}
    index = re.search(r"\[(\d+)\]", job_id)
    if index:
        env["PBS_ARRAY_INDEX"] = index.group(1)  # PBS sets it for subjobs only (076)
    if not job_id.startswith("16[]"):  # an array parent never runs a script
        assert job_num_in_bash(env) == num


def test_wrapper_qdel_of_an_unknown_job_says_nothing():
    # Slurm's qdel wrapper: rc 1 and no message (tests/golden/sched/pbswrap_qdel_unknown.txt)
    outcome = D.parse_cancel(1, "", "")
    assert not outcome.sent and not outcome.already_ended and outcome.message == "qdel exited 1 without a message"


@pytest.mark.parametrize(
    "qstat_out, log, cancel_asked, state",
    [
        # PBS Pro, 271 with substate 93: someone else's SIGTERM is a failure, ours a cancel
        (with_attrs(load("067").out, {"substate": "93", "comment": f"{RAN} and failed"}), "", False, "failed"),
        (with_attrs(load("067").out, {"substate": "93", "comment": f"{RAN} and failed"}), "", True, "cancelled"),
        # Torque's C with 271 and no substate: MoM's kill line in the log says walltime
        (
            "Job Id: 89.pbshead\n\tjob_state = C\n\texit_status = 271\n",
            "=>> PBS: job killed: walltime 12 exceeded limit 5\n",
            False,
            "timeout",
        ),
        ("Job Id: 89.pbshead\n\tjob_state = C\n\texit_status = 271\n", "", True, "cancelled"),
        # PBS Pro F, 271, nothing else: failed by SIGTERM, or cancelled when the user asked
        (without_attr(with_attrs(load("067").out, {"comment": ""}), "substate"), "", False, "failed"),
        (without_attr(with_attrs(load("067").out, {"comment": ""}), "substate"), "", True, "cancelled"),
    ],
)
def test_signal_exits_through_the_jobs_life(tmp_path, qstat_out, log, cancel_asked, state):
    from hpc_launch import jobs
    from hpc_launch.records import JobRecord, JobStore

    store = JobStore(tmp_path / "jobs.sqlite")
    store.add(
        JobRecord(
            job_id="89.pbshead",
            cluster="c",
            dialect="pbspro",
            host="localhost",
            name="todel",
            workdir="/w",
            script_path="/w/.hpc-launch/todel.sh",
            log_path="/w/todel.o89",
            exit_path="/w/todel.o89.exitcode",
            submit_time=1.0,
            state="running",
            extra={"cancel_requested_at": 5.0} if cancel_asked else {},
        )
    )
    transport = FakeTransport(lambda argv: CommandResult(0, qstat_out, ""))
    transport.files["/w/todel.o89"] = log.encode()  # no exit-code file: the job's shell was killed
    got = jobs.refresh(store, [store.get("89.pbshead", "c")], lambda host: transport)[0]
    assert got.state == state


# ---- a user's own array (`--directive "-J 1-2"`): one record, the tasks write the files -----------


def user_array_record(store, job_id="20[].pbshead", directive="-J 1-2", state="running"):
    from hpc_launch.records import JobRecord

    store.add(
        JobRecord(
            job_id=job_id,
            cluster="c",
            dialect="pbspro",
            host="localhost",
            name="arr",
            workdir="/w",
            script_path="/w/.hpc-launch/arr-20261127.sh",
            log_path=f"/w/arr.o{job_id.split('[')[0]}",
            exit_path=f"/w/arr.o{job_id.split('[')[0]}.exitcode",
            submit_time=1.0,
            state=state,
            submit_argv=["qsub", "-N", "arr", "-j", "oe", ".hpc-launch/arr-20261127.sh"],
        )
    )
    script = f"#!/bin/bash\n#PBS -N arr\n#PBS {directive}\n#PBS -j oe\n# Generated by hpc-launch\nset -e\n"
    return store.get(job_id, "c"), script.encode()


@pytest.mark.parametrize(
    "codes, state, exit_code, comment",
    [
        ({1: 0, 2: 0}, "done", 0, "all 2 array tasks wrote exit code 0"),
        ({1: 0, 2: 3}, "failed", 3, "1 of 2 array tasks failed, first 20[2].pbshead: exit code 3"),
        ({1: 0}, "failed", None, "1 of 2 array tasks failed, first 20[2].pbshead: ended without writing"),
    ],
)
def test_a_user_array_ends_as_its_tasks_exit_files_say(tmp_path, codes, state, exit_code, comment):
    # history off (142-143): the finished array is `Unknown Job Id`; its own NAME.o20.exitcode never
    # exists (an array runs no script), each subjob wrote NAME.o20.i.exitcode (157: NAME.o90.1 ...)
    from hpc_launch import jobs
    from hpc_launch.records import JobStore

    store = JobStore(tmp_path / "jobs.sqlite")
    rec, script = user_array_record(store)
    history_off = {
        ("qstat", "-f", "-x"): CommandResult(0, "", load("142").err.replace("105.pbshead", "20[].pbshead")),
        ("qstat", "-f"): CommandResult(153, "", load("143").err.replace("105.pbshead", "20[].pbshead")),
    }
    transport = FakeTransport(lambda argv: history_off[tuple(argv[:-1])])
    transport.files[rec.script_path] = script
    for i, code in codes.items():
        transport.files[f"/w/arr.o20.{i}.exitcode"] = f"{code} arr-20261127.sh 1795000000.5\n".encode()
    got = jobs.refresh(store, [rec], lambda host: transport)[0]
    assert (got.state, got.exit_code) == (state, exit_code)
    assert got.comment.startswith(comment)


def test_user_array_task_names_are_the_ones_pbs_writes():
    # 157: -N arrfail -J 1-3 wrote arrfail.o90.1..3; hello.sh -J 1-5:2 wrote hello.sh.o60.1, .3, .5
    from hpc_launch.jobs.groups import subjob_view
    from hpc_launch.records import JobRecord

    listed = {line.split()[-1] for line in load("157").out.splitlines()}
    for array, name, directive in (("90[].pbshead", "arrfail", "-J 1-3"), ("60[].pbshead", "hello.sh", "-J 1-5:2")):
        num = array.split("[")[0]
        parent = JobRecord(
            job_id=array,
            cluster="c",
            dialect="pbspro",
            host="localhost",
            name=name,
            workdir="/home/pbsuser/work",
            script_path="/home/pbsuser/work/x.sh",
            log_path=f"/home/pbsuser/work/{name}.o{num}",
            exit_path=f"/home/pbsuser/work/{name}.o{num}.exitcode",
            submit_time=1.0,
        )
        script = f"#!/bin/bash\n#PBS {directive}\necho\n"
        tasks = D.user_array_tasks(array, [], lambda script=script: script)
        logs = {subjob_view(parent, t).log_path.rsplit("/", 1)[1] for t in tasks}
        assert logs == {f for f in listed if f.startswith(f"{name}.o{num}.")}
    assert D.user_array_tasks("20[].pbshead", ["qsub", "-J", "1-2", "s.sh"], lambda: "") == [
        "20[1].pbshead",
        "20[2].pbshead",
    ]
    assert D.user_array_tasks("20.pbshead", [], lambda: "#PBS -J 1-2\n") == []  # not an array id
