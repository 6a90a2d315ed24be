"""The group (project, account) the job is charged to."""

from __future__ import annotations

from typing import Optional

from ..errors import SpecError
from ..site.profiles import Profile
from ..spec import JobSpec
from .common import check_token


def group_of(spec: JobSpec, p: Profile) -> Optional[str]:
    """--group, else the profile's default; refused where the site requires one and none is given."""
    group = spec.group or p.group.default
    if group:
        check_token(group, p.group.label, "pass --group with the plain group/project name")
    elif p.group.required:
        raise SpecError(
            f"{p.name} requires an {p.group.label} for accounting",
            hint="pass --group NAME (alias --project), or set `group:` in hpc-launch.yaml",
        )
    return group
