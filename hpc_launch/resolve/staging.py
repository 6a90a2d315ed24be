"""The profile as this job uses it: --stage-env / --stage-data / --no-stage over its `stage:`,
and a --container image the site has wiring for."""

from __future__ import annotations

from msgspec.structs import replace

from .. import launchers
from ..errors import SpecError
from ..profiles import Profile, Stage
from ..spec import JobSpec


def staged_profile(spec: JobSpec, p: Profile, launcher: launchers.Launcher) -> Profile:
    """The profile with --stage-env / --stage-data / --no-stage over its `stage:`."""
    if spec.stage_env is None and spec.stage_data is None:
        return p
    if spec.stage_env is False:
        return replace(p, stage=Stage(dest=p.stage.dest, timeout_s=p.stage.timeout_s, directives=p.stage.directives))
    option = "--stage-env" if spec.stage_env else "--stage-data"
    if not launcher.per_node:
        raise SpecError(
            f"{option}: the {launcher.name} launcher of {p.name} has no way to run one task per node",
            hint="submit without it, or to a profile whose launcher is srun, mpiexec, mpirun or pdsh",
        )
    try:
        stage = Stage(
            env=bool(spec.stage_env) or p.stage.env,
            data=spec.stage_data if spec.stage_data is not None else p.stage.data,
            dest=p.stage.dest,
            timeout_s=p.stage.timeout_s,
            directives=p.stage.directives,
        )
    except ValueError as exc:
        fix = "set stage.dest, the node-local directory, in your profile (docs/staging.md)"
        raise SpecError(f"{option}: {exc}", hint=fix if not p.stage.dest else "give an absolute directory") from None
    return replace(p, stage=stage)


def check_container(spec: JobSpec, p: Profile) -> None:
    if spec.container:
        from ..container import container_of

        container_of(p, spec.container)  # a one-line error naming what to add where the site has no wiring
