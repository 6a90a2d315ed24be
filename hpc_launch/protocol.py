"""The job protocol: what the launcher, the job script and the trainer agree on, written once.

Python reads these names; templates get this module as `proto` (render.py), so a script and
the code that reads what it leaves behind cannot drift apart.
"""

from __future__ import annotations

# Where a command runs when it runs on this machine (a record's `host`, a transport's name).
LOCAL_HOST = "localhost"
# What a user may write for "this machine" (--login, a record's host).
LOCAL_NAMES = ("", "local", LOCAL_HOST)


def is_local(host: str | None) -> bool:
    return (host or "") in LOCAL_NAMES


# Exit codes of a job script and the trainer (the shell's 128+signal convention for the three
# signals a scheduler or a user sends).
EXIT_OK = 0
EXIT_RESUMABLE = 75   # stopped for time at a complete checkpoint: the next chain link resumes
EXIT_SIGINT = 130
EXIT_SIGKILL = 137
EXIT_SIGTERM = 143
