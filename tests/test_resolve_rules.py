"""Each of resolve's rules (hpc_launch/resolve/) on its own: a refusal and an accepted case per
rule module, called directly with a shipped profile. The whole of `resolve` is exercised by
test_validation.py, test_site_rules.py and the golden scripts; these pin each rule where it lives."""

from __future__ import annotations

import sys

import pytest
from msgspec.structs import replace

from hpc_launch import dialects
from hpc_launch.site import launchers, profiles
from hpc_launch.errors import SpecError
from hpc_launch.resolve import (
    common,
    compute,
    directives,
    environment,
    failover,
    group,
    hosts,
    queue_time,
    resolve,
    script,
    staging,
)
from hpc_launch.spec import JobSpec


def _p(name):
    return profiles.load(name)


def _d(name):
    return dialects.get(_p(name).dialect)


def _l(name):
    return launchers.get(_p(name).launch.launcher)


# --- common ------------------------------------------------------------------------------------


def test_common_token_refuses_a_leading_dash_and_takes_a_module_path():
    with pytest.raises(SpecError, match=r"queue '-x' has characters a scheduler cannot take"):
        common.check_token("-x", "queue", "fix")
    assert common.check_token("cuda/12.6", "module", "fix") == "cuda/12.6"


# --- queue_time --------------------------------------------------------------------------------


def test_queue_time_asked_walltime_holds_the_seconds_or_the_reason():
    assert queue_time.asked_walltime("1:00:00").seconds == 3600
    assert queue_time.asked_walltime(None) == queue_time.Asked(None)
    bad = queue_time.asked_walltime("soon")
    assert bad.seconds is None and bad.error
    with pytest.raises(SpecError, match=r"^--walltime: "):
        queue_time.walltime_of(bad, _p("slurm"), None, None)


def test_queue_time_default_queue_falls_back_by_nodes_and_walltime():
    aurora = _p("aurora")  # default debug-scaling (2-256 nodes, 1 h); fallbacks debug, capacity, prod
    assert queue_time.default_queue(aurora, 4, queue_time.asked_walltime("0:30:00")) == "debug-scaling"
    assert queue_time.default_queue(aurora, 1, queue_time.asked_walltime("0:30:00")) == "debug"
    assert queue_time.default_queue(aurora, 4, queue_time.asked_walltime("3:00:00")) == "capacity"


def test_queue_time_unknown_queue_and_its_node_limits():
    aurora = _p("aurora")
    asked = queue_time.asked_walltime(None)
    with pytest.raises(SpecError, match=r"unknown queue 'debgu' on aurora") as e:
        queue_time.queue_of(JobSpec(nodes=1, queue="debgu"), aurora, asked)
    assert "did you mean debug?" in str(e.value.hint)
    with pytest.raises(SpecError, match=r"--nodes 3 is above the debug limit of 2 nodes on aurora"):
        queue_time.queue_of(JobSpec(nodes=3, queue="debug"), aurora, asked)
    name, queue = queue_time.queue_of(JobSpec(nodes=2, queue="debug"), aurora, asked)
    assert name == "debug" and queue is aurora.queues["debug"]


def test_queue_time_the_requests_walltime_is_parsed_once(monkeypatch):
    """aurora's default queue and three fallbacks are each asked whether they take the job: every
    one of them reads the one parse (it was parsed once per queue tried, then again)."""
    import hpc_launch.walltime as walltime

    calls = []
    original = walltime.parse_walltime

    def counting(text):
        calls.append(text)
        return original(text)

    # every module's own binding of parse_walltime, so the count holds wherever it is called from
    for module in list(sys.modules.values()):
        if (module.__name__ or "").startswith("hpc_launch") and getattr(module, "parse_walltime", None) is original:
            monkeypatch.setattr(module, "parse_walltime", counting)
    spec = JobSpec(cluster="aurora", nodes=8, walltime="30:00:00", group="proj", venv="/v", workdir="/w")
    job = resolve(spec, _p("aurora"), cwd="/w")
    assert (job.queue, job.walltime_s) == ("capacity", 30 * 3600)  # debug-scaling and debug do not take it
    assert calls.count("30:00:00") == 1, calls


def test_queue_time_stop_before_and_chain():
    with pytest.raises(SpecError, match=r"--stop-before 01:00:00 leaves no time before the walltime 00:30:00"):
        queue_time.stop_before(JobSpec(stop_before="1h"), 1800)
    assert queue_time.stop_before(JobSpec(), 3600) == 300
    assert queue_time.stop_before_of(JobSpec(), 120, has_scheduler=False) == 30  # half, with no scheduler
    with pytest.raises(SpecError, match=r"--chain needs a scheduler"):
        queue_time.check_chain(JobSpec(chain=2), _p("local"), has_scheduler=False)
    queue_time.check_chain(JobSpec(chain=2), _p("slurm"), has_scheduler=True)


# --- compute -----------------------------------------------------------------------------------


def test_compute_nodes_default_and_refusal():
    assert compute.with_nodes(JobSpec(hosts=["a", "b"]), has_scheduler=False).nodes == 2
    assert compute.with_nodes(JobSpec(hosts=["a", "b"]), has_scheduler=True).nodes == 1
    with pytest.raises(SpecError, match=r"--nodes must be a whole number of at least 1, not 0"):
        compute.with_nodes(JobSpec(nodes=0), has_scheduler=True)


def test_compute_gpus_within_the_node_and_one_rank_on_a_cpu_node():
    aurora = _p("aurora")
    n = aurora.node_gpus(None)
    assert compute.gpus_and_procs(JobSpec(), aurora, None) == (n, n)
    assert compute.gpus_and_procs(JobSpec(gpus_per_node=0), aurora, None) == (0, 1)
    with pytest.raises(SpecError, match=rf"--gpus-per-node {n + 1} is more than the {n} GPUs of a aurora node"):
        compute.gpus_and_procs(JobSpec(gpus_per_node=n + 1), aurora, None)


# --- group -------------------------------------------------------------------------------------


def test_group_required_by_the_site_and_a_plain_name_taken():
    with pytest.raises(SpecError, match=r"aurora requires an ALCF project for accounting"):
        group.group_of(JobSpec(), _p("aurora"))
    assert group.group_of(JobSpec(group="proj"), _p("aurora")) == "proj"
    with pytest.raises(SpecError, match=r"has characters a scheduler cannot take"):
        group.group_of(JobSpec(group="-x"), _p("aurora"))


# --- environment -------------------------------------------------------------------------------


def test_environment_refuses_a_secret_by_name_and_takes_the_layers_variables():
    with pytest.raises(SpecError, match=r"--env API_TOKEN=\.\.\. would write a secret into the job script"):
        environment.environment_of(JobSpec(nodes=1, env={"API_TOKEN": "x"}), _p("slurm"), _l("slurm"))
    env = environment.environment_of(JobSpec(nodes=1, env={"A": "1"}, stop_signal="usr2"), _p("slurm"), _l("slurm"))
    assert env["A"] == "1" and "SIGUSR2" in env.values()
    with pytest.raises(SpecError, match=r"--stop-signal term: not a signal"):
        environment.layer_env(JobSpec(stop_signal="term"))


def test_environment_secrets_must_be_set_and_notify_travels_as_one(monkeypatch):
    monkeypatch.delenv("NOT_SET_HERE", raising=False)
    with pytest.raises(SpecError, match=r"--pass-env NOT_SET_HERE: it is not set in this shell"):
        environment.secrets_of(JobSpec(nodes=1, pass_env=["NOT_SET_HERE"]), {}, _l("slurm"))
    monkeypatch.setenv("HOOK", "https://example.invalid/x")
    assert environment.secrets_of(JobSpec(nodes=1, notify="HOOK"), {}, _l("slurm")) == (["HOOK"], "HOOK")
    with pytest.raises(SpecError, match=r"HOOK is given both as --env"):
        environment.secrets_of(JobSpec(nodes=1, pass_env=["HOOK"]), {"HOOK": "1"}, _l("slurm"))


def test_environment_modules_are_plain_words():
    assert environment.modules_of(JobSpec(modules=["cuda/12.6"]), _p("slurm")) == ["cuda/12.6"]
    with pytest.raises(SpecError, match=r"module 'a;b' has characters"):
        environment.modules_of(JobSpec(modules=["a;b"]), _p("slurm"))


# --- hosts -------------------------------------------------------------------------------------


def test_hosts_named_once_and_the_first_nodes_taken():
    pods = _p("pods")
    with pytest.raises(SpecError, match=r"host a is listed twice"):
        hosts.listed_hosts(JobSpec(hosts=["a", "a"]), pods)
    spec = JobSpec(nodes=2, hosts=["a", "b", "c"])
    assert hosts.hosts_for_nodes(spec, pods, _d("pods"), _l("pods"), ["a", "b", "c"]) == ["a", "b"]
    with pytest.raises(SpecError, match=r"pods has no node list"):
        hosts.hosts_for_nodes(JobSpec(nodes=1), pods, _d("pods"), _l("pods"), [])


def test_hosts_exclusion_needs_a_scheduler_that_can_and_gather_needs_none():
    with pytest.raises(SpecError, match=r"cannot keep a job off named hosts \(--exclude n1\)"):
        hosts.avoidance(JobSpec(exclude=["n1", "n1"]), _d("aurora"), _l("aurora"), [])
    assert hosts.avoidance(JobSpec(exclude=["n1", "n1"]), _d("slurm"), _l("slurm"), []) == (["n1"], 0)
    with pytest.raises(SpecError, match=r"--gather is for machines with no scheduler"):
        hosts.check_gather(JobSpec(nodes=2, gather=29400), _p("slurm"), _d("slurm"), _l("slurm"))
    hosts.check_gather(JobSpec(nodes=2, gather=29400), _p("pods"), _d("pods"), _l("pods"))
    no_sched = JobSpec(hosts=["a", "b"], exclude=["b"])
    assert hosts.without_excluded(no_sched, _p("pods"), _d("pods")).hosts == ["a"]


# --- directives --------------------------------------------------------------------------------


def test_directives_need_a_scheduler_and_one_line_each():
    with pytest.raises(SpecError, match=r"local has no scheduler to read directives"):
        directives.with_directive_options(JobSpec(directives=["-x"]), _p("local"), _d("local"))
    with pytest.raises(SpecError, match=r"must be one non-empty line"):
        directives.check_directive_lines(JobSpec(directives=["a\nb"]))
    directives.check_directive_lines(JobSpec(directives=["-l place=scatter"]))
    # the prefix is hpc-launch's to write: '#PBS -q x' rendered '#PBS #PBS -q x', unchecked (hypothesis found it)
    with pytest.raises(SpecError, match=r"starts with its own prefix") as refused:
        directives.check_directive_lines(JobSpec(directives=["#PBS -q evil"]))
    assert "--directive '-q evil'" in str(refused.value.hint)


def test_directives_job_name():
    with pytest.raises(SpecError, match=r"job name '1st' is not usable"):
        directives.check_name(JobSpec(name="1st"))
    directives.check_name(JobSpec(name="train-1.b"))


# --- script ------------------------------------------------------------------------------------


def test_script_arguments_and_work_dir():
    slurm = replace(_p("slurm"), train_args=["--epochs", "1"])
    assert script.train_args_of(JobSpec(), slurm) == ["--epochs", "1"]
    assert script.train_args_of(JobSpec(script="mine.py"), slurm) == []  # the profile's are the entrypoint's
    with pytest.raises(SpecError, match=r"a training argument contains a NUL byte"):
        script.train_args_of(JobSpec(train_args=["a\x00"]), slurm)
    with pytest.raises(SpecError, match=r"the work directory path contains a newline"):
        script.workdir_of(JobSpec(workdir="/a\nb"), None)
    assert script.workdir_of(JobSpec(), "/here") == "/here"


def test_script_python_env_a_site_without_torch_needs_one():
    aurora = _p("aurora")  # python.env_required
    with pytest.raises(SpecError, match=r"aurora jobs would run the system python3, which has no torch"):
        script.python_env_of(JobSpec(), aurora, host="aurora-login")
    assert script.python_env_of(JobSpec(venv="/v"), aurora, host="aurora-login") == ("/v", None)


# --- staging -----------------------------------------------------------------------------------


def test_staging_needs_a_launcher_that_runs_one_task_per_node():
    slurm = _p("slurm")
    no_per_node = replace(_l("slurm"), per_node=None)
    with pytest.raises(SpecError, match=r"--stage-env: the srun launcher of slurm has no way to run one task per node"):
        staging.staged_profile(JobSpec(stage_env=True), slurm, no_per_node)
    assert staging.staged_profile(JobSpec(), slurm, no_per_node) is slurm
    assert not staging.staged_profile(JobSpec(stage_env=False), slurm, _l("slurm")).stage.on


# --- failover ----------------------------------------------------------------------------------


def test_failover_needs_a_checkpoint_and_the_entrypoint():
    with pytest.raises(SpecError, match=r"a --script resumes as it sees fit"):
        failover.failover_of(JobSpec(failover=1, script="mine.py"), [])
    with pytest.raises(SpecError, match=r"the training arguments name no --checkpoint-dir"):
        failover.failover_of(JobSpec(failover=1), [])
    assert failover.failover_of(JobSpec(failover=2), ["--checkpoint-dir=/c"]) == 2


# --- the coordinator ---------------------------------------------------------------------------


def test_the_first_rule_in_order_is_the_one_reported():
    """The job name is checked before the node count, as it always was."""
    with pytest.raises(SpecError, match=r"job name '1st' is not usable"):
        resolve(JobSpec(name="1st", nodes=0), _p("slurm"), cwd="/w")
    job = resolve(JobSpec(nodes=2, walltime="1:00:00"), _p("slurm"), cwd="/w")
    assert (job.nodes, job.walltime_s, job.workdir) == (2, 3600, "/w")
