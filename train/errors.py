"""User errors of the training entrypoint: printed as one line (no traceback), exit code 2."""

from hpc_launch.errors import HpcLaunchError


class TrainError(HpcLaunchError):
    """Bad flags, batch arithmetic that does not fit, unknown model, missing data, unsupported precision."""
