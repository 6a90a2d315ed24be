"""`hpc-launch tune`, the part that runs inside the job (templates/body/tune.sh.j2): which trial
comes next, what a trial's log says, the winner. Standard library only: it runs in the job's Python.

For each ZeRO stage / offload choice the largest micro-batch that fits is found by bisection over
[lo, hi]: lo first (if it does not fit, nothing does), then hi (if it fits, it is the answer), then
the middle of the largest that fits and the smallest that does not, so a choice takes at most
ceil(log2(hi - lo)) + 2 trials. A trial that does not fit is an out-of-memory one: the training
said so (CUDA/torch out of memory, MemoryError, the kernel's OOM kill), or, with `mem_limit_gb`,
its rank 0's peak memory (peak RSS on CPU, the `mem_peak_gb` of its step lines) went above the
cap. Every trial is a line (JSON) in the journal; a cut job's successor reads it and goes on.

    python -m hpc_launch.tune_trials next SPEC JOURNAL     # NUL-separated: trial, trials left (at most), arguments
    python -m hpc_launch.tune_trials record SPEC JOURNAL TRIAL RC LOG JOB_ID SCRIPT
    python -m hpc_launch.tune_trials winner SPEC JOURNAL   # NUL-separated arguments of the fastest fitting trial
"""

from __future__ import annotations

import json
import math
import re
import sys
from typing import Any, Dict, List, Optional, Tuple

OOM_WORDS = re.compile(
    r"out of memory|OutOfMemoryError|MemoryError|CUBLAS_STATUS_ALLOC_FAILED|Cannot allocate memory"
    r"|std::bad_alloc|oom-kill|Killed process",
    re.I,
)
_STEP = re.compile(r"^\[hpc-train\] (step=.*)$", re.M)
_KILLED = (124, 137, 143)


def _fits(state: str) -> bool:
    return state == "done"


def trials_of(journal: List[Dict[str, Any]], choice: int) -> Dict[int, str]:
    return {t["micro"]: t["state"] for t in journal if t["choice"] == choice}


def next_micro(tried: Dict[int, str], lo: int, hi: int) -> Optional[int]:
    """The next micro-batch to try for one choice, or None when its largest fitting one is known."""
    if lo not in tried:
        return lo
    if not _fits(tried[lo]):
        return None
    if hi not in tried:
        return hi
    good = max(m for m, s in tried.items() if _fits(s))
    above = [m for m, s in tried.items() if not _fits(s) and m > good]
    if not above:
        return None  # hi fits
    bad = min(above)
    return None if bad - good <= 1 else (good + bad) // 2


def most_trials(lo: int, hi: int) -> int:
    return 1 if hi <= lo else math.ceil(math.log2(hi - lo)) + 2


def largest_fitting(tried: Dict[int, str]) -> Optional[int]:
    fitting = [m for m, s in tried.items() if _fits(s)]
    return max(fitting) if fitting else None


def trial_args(spec: Dict[str, Any], choice: Dict[str, Any], micro: int) -> List[str]:
    return (
        list(spec["base_args"])
        + ["--zero", str(choice["zero"]), "--offload", choice["offload"]]
        + [
            "--micro-batch",
            str(micro),
        ]
    )


def next_trial(spec: Dict[str, Any], journal: List[Dict[str, Any]]) -> Optional[Tuple[int, int, int]]:
    """(choice index, micro-batch, trials left at most), or None when every choice is settled."""
    lo, hi = spec["lo"], spec["hi"]
    for i, _ in enumerate(spec["choices"]):
        micro = next_micro(trials_of(journal, i), lo, hi)
        if micro is not None:
            left = sum(max(1, most_trials(lo, hi) - len(trials_of(journal, j))) for j in range(i, len(spec["choices"])))
            return i, micro, left
    return None


def figures(log_text: str) -> Dict[str, Optional[float]]:
    """The last step line's running means and the highest peak memory of any step line."""
    out: Dict[str, Optional[float]] = {"samples_per_sec": None, "tokens_per_sec": None, "peak_gb": None}
    for m in _STEP.finditer(log_text):
        fields = dict(kv.split("=", 1) for kv in m.group(1).split() if "=" in kv)
        for key, name in (("avg_samples_per_sec", "samples_per_sec"), ("avg_tokens_per_sec", "tokens_per_sec")):
            if key in fields:
                out[name] = _num(fields[key])
        peak = _num(fields.get("mem_peak_gb", ""))
        if peak is not None:
            out["peak_gb"] = max(peak, out["peak_gb"] or 0.0)
    return out


def _num(text: str) -> Optional[float]:
    try:
        return float(text)
    except ValueError:
        return None


def classify(rc: int, log_text: str, mem_limit_gb: Optional[float]) -> Tuple[str, Dict[str, Optional[float]]]:
    """`done`, `oom` (the training ran out of memory, or went above the cap), `timeout` (its limit
    stopped it) or `failed`; and its figures."""
    got = figures(log_text)
    if rc == 0:
        over = mem_limit_gb is not None and got["peak_gb"] is not None and got["peak_gb"] > mem_limit_gb
        return ("oom" if over else "done"), got
    if OOM_WORDS.search(log_text[-20000:]):
        return "oom", got
    if rc == 75 or (rc in _KILLED and "outlived its limit" in log_text[-2000:]):
        return "timeout", got
    return "failed", got


def winner(journal: List[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """The fastest trial that fits: tokens/s for language models, else samples/s."""
    fitting = [t for t in journal if _fits(t["state"]) and (t.get("tokens_per_sec") or t.get("samples_per_sec"))]
    if not fitting:
        return None
    return max(fitting, key=lambda t: (t.get("tokens_per_sec") or 0.0, t.get("samples_per_sec") or 0.0))


def read_journal(path: str) -> List[Dict[str, Any]]:
    out: List[Dict[str, Any]] = []
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    continue  # a line cut by the walltime's kill
    except FileNotFoundError:
        pass
    return out


def main(argv: List[str]) -> int:
    what, spec, path = argv[0], json.loads(argv[1]), argv[2]
    journal = read_journal(path)
    if what == "next":
        step = next_trial(spec, journal)
        if step is None:
            return 0
        i, micro, left = step
        sys.stdout.write("\0".join([str(len(journal) + 1), str(left)] + trial_args(spec, spec["choices"][i], micro)))
        return 0
    if what == "record":
        trial, rc, log, job_id, script = int(argv[3]), int(argv[4]), argv[5], argv[6], argv[7]
        step = next_trial(spec, journal)
        if step is None:
            return 0
        i, micro, _ = step
        try:
            with open(log, encoding="utf-8", errors="replace") as fh:
                text = fh.read()
        except OSError:
            text = ""
        state, got = classify(rc, text, spec.get("mem_limit_gb"))
        line = {"trial": trial, "choice": i, **spec["choices"][i], "micro": micro, "state": state, "exit_code": rc}
        line.update(got, log=log, job_id=job_id, script=script)
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(line) + "\n")
        print(
            f"[hpc-launch] tune trial {trial}: zero={line['zero']} offload={line['offload']} "
            f"micro_batch={micro}: {state}"
        )
        return 0
    if what == "winner":
        best = winner(journal)
        if best:
            sys.stdout.write("\0".join(trial_args(spec, best, best["micro"])))
        return 0
    print(
        f"usage: python -m hpc_launch.tune_trials next|record|winner SPEC JOURNAL ... (not {what!r})", file=sys.stderr
    )
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
