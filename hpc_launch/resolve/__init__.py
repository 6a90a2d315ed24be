"""`resolve`: a JobSpec checked against a cluster profile, rule by rule, before anything is
written or submitted; each problem is a SpecError with one line that names the fix.

The rules, in the order they run (the first problem found is the one reported):

    staging      --stage-env/--stage-data/--no-stage over the profile's stage:, a --container's wiring
    hosts        with no scheduler, --exclude hosts dropped from the host list
    directives   --directive lines read back into the options they set; the job name
    compute      --nodes
    queue_time   the queue (parsed walltime in hand: `asked`), its node limits, the walltime,
                 --stop-before, --chain
    compute      GPUs per node and ranks per node
    group        --group
    environment  modules, --env and the rank layer's variables, --pass-env and --notify
    directives   each --directive one line
    hosts        the host list, --exclude and --spares, --gather, the hosts a pods job takes
    script       the training arguments, the work directory
    site_rules   the site's own rules (site_rules.py)
    script       the venv or conda env
    failover     --failover
"""

from __future__ import annotations

from typing import Optional

from .. import dialects
from ..site import launchers, rules as site_rules
from ..site.profiles import Profile
from ..protocol import LOCAL_HOST
from ..spec import JobSpec
from . import compute, directives, environment, hosts, queue_time, script
from .common import MAX_CHAIN as MAX_CHAIN
from .common import MAX_SPARES as MAX_SPARES
from .common import MAX_WALLTIME_S as MAX_WALLTIME_S
from .failover import failover_of
from .group import group_of
from .job import ResolvedJob as ResolvedJob
from .staging import container_profile, staged_profile


def resolve(spec: JobSpec, profile: Profile, *, cwd: Optional[str] = None, host: str = LOCAL_HOST) -> ResolvedJob:
    """`host`: where the job is submitted from (decided by `prepare.choose_host`, never here)."""
    dialect = dialects.get(profile.dialect)
    launcher = launchers.get(profile.launch.launcher)
    has_scheduler = dialect.has_scheduler
    p = staged_profile(spec, profile, launcher)
    p = container_profile(spec, p)
    spec = hosts.without_excluded(spec, p, dialect)
    spec = directives.with_directive_options(spec, p, dialect)
    directives.check_name(spec)
    spec = compute.with_nodes(spec, has_scheduler)
    assert isinstance(spec.nodes, int)

    asked = queue_time.asked_walltime(spec.walltime)  # the one parse of the request's walltime
    queue_name, queue = queue_time.queue_of(spec, p, asked)
    walltime_s = queue_time.walltime_of(asked, p, queue_name, queue)
    stop_before_s = queue_time.stop_before_of(spec, walltime_s, has_scheduler)
    queue_time.check_chain(spec, p, has_scheduler)
    gpus, procs = compute.gpus_and_procs(spec, p, queue_name)
    group = group_of(spec, p)

    modules = environment.modules_of(spec, p)
    env = environment.environment_of(spec, p, launcher)
    pass_env, notify = environment.secrets_of(spec, env, launcher)
    directives.check_directive_lines(spec)

    host_list = hosts.listed_hosts(spec, p)
    exclude, spares = hosts.avoidance(spec, dialect, launcher, host_list)
    hosts.check_gather(spec, p, dialect, launcher)
    host_list = hosts.hosts_for_nodes(spec, p, dialect, launcher, host_list)

    train_args = script.train_args_of(spec, p)
    workdir = script.workdir_of(spec, cwd)
    site_rules.check(
        p,
        queue=queue_name,
        nodes=spec.nodes + spares,
        walltime_s=walltime_s,
        procs_per_node=procs,
        chain=spec.chain,
        workdir=workdir,
        group=group,
    )
    venv, conda = script.python_env_of(spec, p, host)
    return ResolvedJob(
        spec=spec,
        profile=p,
        name=spec.name,
        nodes=spec.nodes,
        queue=queue_name,
        walltime_s=walltime_s,
        group=group,
        gpus_per_node=gpus,
        procs_per_node=procs,
        workdir=workdir,
        modules=modules,
        env=env,
        train_args=train_args,
        script=spec.script,
        hosts=host_list,
        venv=venv,
        conda=conda,
        login=spec.login,
        pass_env=pass_env,
        notify=notify,
        stop_before_s=stop_before_s,
        chain=spec.chain,
        exclude=exclude if has_scheduler else [],
        spares=spares,
        failover=failover_of(spec, train_args, staged=p.stage.on),
        container=spec.container or None,
    )
