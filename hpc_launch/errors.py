"""Every error a user can cause is one of these: the CLI prints it as one line and exits non-zero."""

from __future__ import annotations


class HpcLaunchError(Exception):
    """A user-facing error. `str(err)` is a single line that names the fix."""

    exit_code = 2

    def __init__(self, message: str, *, hint: str | None = None):
        self.message = " ".join(message.split())  # always one line
        self.hint = " ".join(hint.split()) if hint else None
        super().__init__(self.one_line())

    def one_line(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


class ProfileError(HpcLaunchError):
    """A cluster profile file is malformed or names unknown values."""


class SpecError(HpcLaunchError):
    """The requested job does not fit the cluster (nodes, walltime, group, GPUs...)."""


class HostfileError(HpcLaunchError):
    """No node list could be found or it is malformed."""


class SchedulerError(HpcLaunchError):
    """The scheduler refused a command or printed something we cannot parse."""

    exit_code = 3


class TransportError(HpcLaunchError):
    """Running a command or moving a file (locally or over SSH) failed."""

    exit_code = 3
    # True when a command may have run before contact was lost: never re-send it (no duplicate jobs).
    maybe_ran: bool = False


class HostKeyError(TransportError):
    """The SSH host key is unknown or changed: never auto-accepted."""


class TemplateError(HpcLaunchError):
    """A job template (shipped or the user's override) does not parse or render."""


class StoreError(HpcLaunchError):
    """The job store cannot be opened, read or written."""

    exit_code = 3


class JobNotFound(HpcLaunchError):
    """No record of that job id."""


class AmbiguousJob(HpcLaunchError):
    """The same job id is recorded on several clusters."""
