"""The profile as this job uses it: --stage-env / --stage-data / --no-stage over its `stage:`,
and a --container image the site has wiring for."""

from __future__ import annotations

from msgspec.structs import replace

from ..site import launchers
from ..errors import SpecError
from ..site.profiles import Profile, Stage
from ..spec import JobSpec


def staged_profile(spec: JobSpec, p: Profile, launcher: launchers.Launcher) -> Profile:
    """The profile with --stage-env / --stage-data / --no-stage over its `stage:`."""
    if spec.stage_env is None and spec.stage_data is None:
        return p
    if spec.stage_env is False:
        off = Stage(dest=p.stage.dest, timeout_s=p.stage.timeout_s, directives=p.stage.directives, image=False)
        return replace(p, stage=off)
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
            image=p.stage.image,
        )
    except ValueError as exc:
        fix = "set stage.dest, the node-local directory, in your profile (docs/staging.md)"
        raise SpecError(f"{option}: {exc}", hint=fix if not p.stage.dest else "give an absolute directory") from None
    return replace(p, stage=stage)


def container_profile(spec: JobSpec, p: Profile) -> Profile:
    """The profile with the job's image staged too, or not (docs/containers.md); a --container on a
    site without wiring is a one-line error naming what to add."""
    if spec.container:
        from ..container import container_of

        container_of(p, spec.container)
    if spec.container or p.stage.image is not None:
        from ..container import staging

        p = replace(p, stage=staging(p, spec.container))
    return p
