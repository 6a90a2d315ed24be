"""What the scheduler reads besides the numbers: the job's name and the user's --directive lines."""

from __future__ import annotations

from msgspec.structs import replace

from .. import dialects
from ..directive_limits import directive_options
from ..errors import SpecError
from ..site.profiles import Profile
from ..spec import JobSpec
from .common import CONTROL, NAME


def with_directive_options(spec: JobSpec, p: Profile, dialect: dialects.Dialect) -> JobSpec:
    """A --directive that sets walltime, queue, nodes or GPUs, read back into the option
    (directive_limits.py) so the option's limits apply; none where no scheduler reads them."""
    if spec.directives and not dialect.has_scheduler:
        raise SpecError(
            f"--directive {spec.directives[0]!r}: {p.name} has no scheduler to read directives",
            hint="drop --directive, or submit to a cluster with a scheduler",
        )
    return replace(spec, **directive_options(spec, p, dialect))


def check_name(spec: JobSpec) -> None:
    if not NAME.match(spec.name or ""):
        raise SpecError(
            f"job name {spec.name!r} is not usable",
            hint="use --name with a letter first, then letters, digits, '_', '.', '-' (at most 63)",
        )


def check_directive_lines(spec: JobSpec) -> None:
    """Each --directive one line: the scheduler reads the script's directive block line by line."""
    for line in spec.directives:
        if CONTROL.search(line) or not line.strip():
            raise SpecError(
                f"directive {line!r} must be one non-empty line",
                hint="pass each --directive as a single line such as '-l place=scatter'",
            )
        if line.lstrip().startswith("#"):
            # '#PBS -q x' would render as '#PBS #PBS -q x': a line the scheduler misreads, and one the
            # queue and walltime checks (directive_limits.py) never see
            raise SpecError(
                f"directive {line!r} starts with its own prefix",
                hint=f"give the options only, e.g. --directive {line.lstrip().split(None, 1)[-1]!r}: "
                "hpc-launch writes the scheduler's prefix itself",
            )
