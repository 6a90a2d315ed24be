"""User errors of the training entrypoint: printed as one line (no traceback), exit code 2."""

from typing import Optional

from hpc_launch import protocol
from hpc_launch.errors import HpcLaunchError


class TrainError(HpcLaunchError):
    """Bad flags, batch arithmetic that does not fit, unknown model, missing data, unsupported precision."""


class PreflightError(TrainError):
    """The job started as something other than what was asked: nothing trains."""

    exit_code = protocol.EXIT_PREFLIGHT

    def __init__(self, message: str, *, hint: Optional[str] = None, every_rank: bool = False):
        super().__init__(message, hint=hint)
        self.every_rank = every_rank  # only this rank knows it (a duplicate, a missing verdict): it says so itself
