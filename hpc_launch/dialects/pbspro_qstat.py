"""What PBS Professional's commands print, read: `qstat -f` blocks (wrapped values included),
Variable_List, the default `qstat` table, qstat's times, job ids (arrays and subjobs), and a
script's `#PBS` words as qsub reads them."""

from __future__ import annotations

import re
import time
from typing import Dict, List, Optional, Tuple

_HEADER = re.compile(r"^(Job Id|Queue|Server):?\s+(\S+)\s*$")  # qstat -f / -Qf / -Bf, qmgr list
_ARRAY = re.compile(r"^(\d+)\[(\d*)\]$")  # the sequence part of `16[]` (array) or `16[3]` (subjob)


def parse_full(text: str, kind: str = "Job Id") -> List[Tuple[str, Dict[str, str]]]:
    """`qstat -f` text: [(id, {attribute: value})] of the `kind` blocks (Job Id, Queue, Server).
    Attribute lines start with 4 spaces (a TAB in Torque-style output); long values wrap onto
    lines that start with one TAB and are joined with nothing in between, since the wrap falls
    anywhere, mid-word included. A line with no indent continues a value that holds a raw
    newline (an exported bash function under `qsub -V`)."""
    blocks: List[Tuple[str, Dict[str, str]]] = []
    attrs: Optional[Dict[str, str]] = None
    key = indent = None
    for line in text.split("\n"):
        head = _HEADER.match(line)
        if head:
            attrs, key, indent = {}, None, None
            if head.group(1) == kind:
                blocks.append((head.group(2), attrs))
            continue
        if attrs is None or not line.strip():
            continue
        if indent is None:
            indent = "\t" if line.startswith("\t") else "    "
        m = re.match(re.escape(indent) + r"([A-Za-z_][\w.]*) =(?: (.*))?$", line)
        if m:
            key = m.group(1)
            attrs[key] = m.group(2) or ""  # exact: a value may end in a space (state_count)
        elif key is not None:
            wrapped = indent != "\t" and line.startswith("\t")
            attrs[key] += line[1:] if wrapped else "\n" + line
    return blocks


def variable_list(value: str) -> Dict[str, str]:
    """Variable_List text (`A=1,B=x\\,y,...`): commas inside values are escaped as `\\,`,
    quotes and backslashes as `\\"` and `\\\\`."""
    out: Dict[str, str] = {}
    for item in re.findall(r"(?:\\.|[^,\\])+", value, flags=re.S):
        name, _, val = item.partition("=")
        out[name] = re.sub(r"\\(.)", r"\1", val, flags=re.S)
    return out


def parse_table(text: str) -> Dict[str, Tuple[str, str]]:
    """The default `qstat` table (also -w, -answ1, -x, -t, Torque's): {id: (state letter, comment)}.
    Columns are found from the dashes under the header, not by counting words (names are cut
    and padded, `-answ1` adds columns and puts the comment on its own line)."""
    lines = text.split("\n")
    for i, line in enumerate(lines[1:], 1):
        if re.fullmatch(r"-+( +-+)+ *", line):
            spans = [m.span() for m in re.finditer(r"-+", line)]
            header = lines[i - 1]
            col = next((s for s in spans if header[s[0] : s[1]].strip() == "S"), None)
            break
    else:
        return {}
    rows: Dict[str, Tuple[str, str]] = {}
    last = None
    for line in lines[i + 1 :]:
        if not line.strip():
            continue
        if line[0] == " " and last is not None:  # -answ1 -s: the comment line ("    -- " when none)
            rows[last] = (rows[last][0], "" if line.strip() == "--" else line.strip())
            continue
        if col is not None and len(line) >= col[1]:
            last = line.split()[0]
            rows[last] = (line[col[0] : col[1]].strip(), "")
    return rows


def qstat_time(value: str) -> Optional[float]:
    """A `qstat -f` time (`Sun Nov 22 22:25:24 2026`, the server's local time, read as ours)
    -> epoch seconds; None when absent or unreadable. The scheduler's backfill sets the job's
    `estimated.start_time` when it computes one (pbs_job_attributes(7B), "estimated";
    https://github.com/openpbs/openpbs/blob/master/doc/man1/pbs_job_attributes.7B)."""
    try:
        return time.mktime(time.strptime(" ".join(value.split()), "%a %b %d %H:%M:%S %Y"))
    except ValueError:
        return None


def _int(value: Optional[str]) -> Optional[int]:
    return int(value) if value and re.fullmatch(r"-?\d+", value.strip()) else None


def _key(job_id: str) -> str:
    """What identifies a job across outputs: `51` for `51.pbshead` (and the wrapper's bare `51`)."""
    return job_id.split(".", 1)[0]


def is_array(job_id: str) -> bool:
    return _key(job_id).endswith("[]")


def directive_words(script: str) -> List[str]:
    """The words of a script's `#PBS` lines, read as qsub reads them: up to the first line that is
    neither blank nor a comment (a later `#PBS` line is ignored, 185-186)."""
    words: List[str] = []
    for line in script.splitlines()[1:]:
        text = line.strip()
        if text and not text.startswith("#"):
            break
        if text.startswith("#PBS"):
            words += text[4:].split()
    return words


def _array_range(words: List[str]) -> List[int]:
    """The indices of qsub's `-J X-Y[:Z][%N]` among `words` (`-J 1-2` or `-J1-2`); [] without one."""
    for i, word in enumerate(words):
        value = words[i + 1] if word == "-J" and i + 1 < len(words) else word[2:] if word.startswith("-J") else ""
        m = re.fullmatch(r"(\d+)-(\d+)(?::(\d+))?(?:%\d+)?", value)
        if m:
            first, last, step = int(m.group(1)), int(m.group(2)), int(m.group(3) or 1)
            return list(range(first, last + 1, max(step, 1)))[:100000]  # PBS's max_array_size default is 10000
    return []
