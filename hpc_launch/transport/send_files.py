"""Files written on the login node by the command that needs them: their bytes travel on that
command's stdin, so a submit over SSH is one exec channel (about three round trips) instead of an
SFTP session with five or six round trips per file.

On the remote side a small bash program (RECEIVER) runs first, under umask 077 and noclobber:
- beside each file's place it makes a new private directory (mode 0700), and in it the file,
  created with O_EXCL under that umask (so 0600 from its first byte), gets exactly its declared
  byte count from stdin (`head -c`, which never reads past it; any byte, NUL and CR included);
- an end line after the last file shows that no file came short (EOF would come first);
- modes are set (a private file keeps 0600: nobody else can read it, not even while it arrives);
- only then is each renamed into place (`mv` within the file system: rename(2), atomic; a file or
  symlink already at the path is replaced, never written through), and the directories removed;
- a failure or a cut connection removes the private directories with whatever they hold (an
  EXIT trap), prints one marked line after the failing tool's own, and the command does not run;
- then the umask is restored and the command exec'd; what is left on stdin is the command's own.
Directories that did not exist are made with the login's own umask, as SFTP made them.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Any, List, Mapping, Optional, Sequence

from .base import CommandResult, Transport, transport_error

# What one call may carry: job scripts and capsules are kilobytes; this bounds a mistake.
MAX_BYTES = 64 << 20
# The receiver's exit code and stderr marker when a file could not be written (the command never ran).
FAILED_RC = 121
FAILED_MARK = "hpc-launch-file-not-written-7d2e"
# After the files' bytes: read whole only if every file got all of its own (EOF shows as its absence).
END_LINE = "hpc-launch-files-end-7d2e"

# bash, run inline by the login shell's bash (no second shell, no base64: one line of printable
# ASCII without "!" or "\\"). Its arguments ("$@"): the directory to run the command in ("" for
# home), the file count, path/mode/size triples, then the command. Few processes, as each costs
# milliseconds on a busy login node: mkdir twice, one `head` per file, chmod per mode, mv per
# directory, rmdir once.
_RECEIVER_LINES = (
    "old=$(umask); umask 077; set -C",
    "cwd=$1 n=$2; shift 2",
    "paths=() modes=() sizes=() dirs=() tmps=() parents=() tdirs=() missing=() ms=()",
    "declare -A slot bymode",
    """trap 'rm -rf -- "${tdirs[@]}"' EXIT""",
    "trap 'exit 129' HUP PIPE TERM INT",
    'fail() { echo "$MARK $1" >&2; exit 121; }',
    "for ((i = 0; i < n; i++)); do paths[i]=$1 modes[i]=$2 sizes[i]=$3; shift 3;"
    " d=${paths[i]%/*}; d=${d:-/}; dirs[i]=$d;"
    ' [ -d "${paths[i]}" ] && { echo "${paths[i]}: Is a directory" >&2; fail "$i"; };'
    ' if [ -z "${slot[$d]+x}" ]; then slot[$d]=${#parents[@]}; parents+=("$d"); [ -d "$d" ] || missing+=("$d"); fi;'
    ' m=${modes[i]}; if [ "$m" = 600 ]; then :;'
    ' else [ -n "${bymode[$m]+x}" ] || ms+=("$m"); bymode[$m]+=" $i"; fi; done',
    'if ((${#missing[@]})); then umask "$old"; mkdir -p -- "${missing[@]}"; umask 077;'
    ' for ((i = 0; i < n; i++)); do [ -d "${dirs[i]}" ] || fail "$i"; done; fi',
    'for ((k = 0; k < ${#parents[@]}; k++)); do tdirs+=("${parents[k]%/}/.hpc-launch.$$.$RANDOM$RANDOM"); done',
    'mkdir -m 700 -- "${tdirs[@]}" || fail 0',
    "for ((i = 0; i < n; i++)); do tmps[i]=${tdirs[${slot[${dirs[i]}]}]}/${paths[i]##*/};"
    ' head -c "${sizes[i]}" >"${tmps[i]}" || fail "$i"; done',
    'IFS= read -r end && [ "$end" = "$END" ] || { echo "the input ended before the last file was whole" >&2; fail 0; }',
    'for m in "${ms[@]}"; do args=(); for i in ${bymode[$m]}; do args+=("${tmps[i]}"); done;'
    ' chmod "$m" -- "${args[@]}" || { first=(${bymode[$m]}); fail "${first[0]}"; }; done',
    "for ((k = 0; k < ${#parents[@]}; k++)); do args=() first=;"
    ' for ((i = 0; i < n; i++)); do [ "${dirs[i]}" = "${parents[k]}" ] &&'
    ' { args+=("${tmps[i]}"); first=${first:-$i}; }; done;'
    ' mv -f -- "${args[@]}" "${parents[k]%/}/" || fail "$first"; done',
    'rmdir -- "${tdirs[@]}"; tdirs=()',
    'trap - EXIT HUP PIPE TERM INT; set +C; umask "$old"',
    '[ -z "$cwd" ] || cd -- "$cwd" || exit 1',
    'exec "$@"',
)
RECEIVER = "; ".join(_RECEIVER_LINES).replace("$MARK", FAILED_MARK).replace("$END", END_LINE)


@dataclass(frozen=True)
class OutgoingFile:
    path: str  # absolute, on the far side
    data: bytes
    mode: int = 0o644
    private: bool = False  # 0600 from its creation (the --pass-env values)


class FileWriteError(OSError):
    """A file of the call could not be written there; none of the call's files is left and the
    command did not run. `filename` is the path, `strerror` the reason the far side gave."""


def receiver_args(files: Sequence[OutgoingFile], argv: Sequence[str], cwd: Optional[str] = None) -> List[str]:
    """RECEIVER's arguments: it writes `files` from stdin, then execs `argv` in `cwd`. A remote
    command starts in the home directory, so "~/x" is just "x"."""
    check(files)
    rel = "" if not cwd or cwd == "~" else cwd[2:] if cwd.startswith("~/") else cwd
    triples: List[str] = []
    for f in files:
        triples += [f.path, format(0o600 if f.private else f.mode, "o"), str(len(f.data))]
    return [rel, str(len(files)), *triples, *argv]


def payload(files: Sequence[OutgoingFile], stdin: Optional[bytes] = None) -> bytes:
    """What goes on stdin: the files' bytes back to back, an end line, then the command's own stdin."""
    return b"".join(f.data for f in files) + END_LINE.encode() + b"\n" + (stdin or b"")


def check(files: Sequence[OutgoingFile]) -> None:
    total = sum(len(f.data) for f in files)
    if total > MAX_BYTES:
        raise transport_error(
            f"{total} bytes of files to send with one command; the limit is {MAX_BYTES >> 20} MiB",
            hint="keep large files (data, checkpoints) on the cluster and pass their paths",
        )
    for f in files:
        if not posixpath.isabs(f.path) or "\0" in f.path:
            raise ValueError(f"not an absolute path: {f.path!r}")


def raise_if_not_written(files: Sequence[OutgoingFile], result: CommandResult) -> None:
    """FileWriteError when the receiver gave up (the command did not run); otherwise nothing."""
    if result.rc != FAILED_RC:
        return
    lines = result.err.splitlines()
    for n, line in enumerate(lines):
        mark, _, index = line.partition(" ")
        if mark == FAILED_MARK and index.isdigit() and int(index) < len(files):
            said = lines[n - 1] if n else ""  # the failing tool's own line: "mkdir: ...: Permission denied"
            reason = said.rsplit(": ", 1)[-1].strip() or "not written"
            raise FileWriteError(0, reason, files[int(index)].path)


def run_with_files(
    transport: Transport,
    files: Sequence[OutgoingFile],
    argv: Sequence[str],
    *,
    cwd: Optional[str] = None,
    env: Optional[Mapping[str, Optional[str]]] = None,
    timeout: float = 60.0,
    stdin: Optional[str] = None,
) -> CommandResult:
    """Write `files` (atomically, private ones 0600 from creation), then run `argv`. A transport
    with its own `run_with_files` (SSH: one round trip) does both at once; others write each file
    (put_text / put_private) and then run the command."""
    own = getattr(transport, "run_with_files", None)
    if own is not None:
        return own(files, argv, cwd=cwd, env=env, timeout=timeout, stdin=stdin)
    check(files)
    for f in files:
        try:
            if f.private:
                transport.put_private(f.path, f.data)
            else:
                transport.put_text(f.path, f.data.decode("utf-8"), mode=f.mode)
        except OSError as exc:
            raise FileWriteError(exc.errno or 0, exc.strerror or str(exc), f.path) from None
    return transport.run(argv, cwd=cwd, env=env, timeout=timeout, stdin=stdin)


class FilesAhead:
    """A transport whose next command first writes the files queued so far (run_with_files):
    code that runs commands (a submit, its scheduler's check) carries them without knowing.
    Everything else goes to the transport itself."""

    def __init__(self, transport: Transport):
        self.transport = transport
        self.host = transport.host
        self.queued: List[OutgoingFile] = []

    def add(self, path: str, data: bytes, mode: int = 0o644, *, private: bool = False) -> None:
        self.queued.append(OutgoingFile(path, data, mode, private))

    def run(
        self,
        argv: Sequence[str],
        *,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, Optional[str]]] = None,
        timeout: float = 60.0,
        stdin: Optional[str] = None,
    ) -> CommandResult:
        files, self.queued = self.queued, []  # sent once: a retried command finds them in place
        if not files:
            return self.transport.run(argv, cwd=cwd, env=env, timeout=timeout, stdin=stdin)
        return run_with_files(self.transport, files, argv, cwd=cwd, env=env, timeout=timeout, stdin=stdin)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.transport, name)
