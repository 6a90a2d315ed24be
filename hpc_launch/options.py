"""The one table of options: each row an option's flags, metavar, help, type, the JobSpec field it
sets (with its value parser and its hpc-launch.yaml kind), and COMMANDS: which commands take which
rows, in the order their help lists them. The typer commands (cli/declare.py), the fast path
(cli/fast.py), the project file's schema (project_config.py) and the empty-text checks
(spec.spec_from) all read it. Standard library only and nothing imported: `hostfile` inside every
job and `submit --dry-run` read it without typer (docs/launch-cost.md).

Adding a job option: a row here (and its name in the commands' lists), its JobSpec field, its rule
in resolve. tests/test_options.py checks every JobSpec field has its row.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterator, Optional, Tuple, Union

Help = Union[str, Callable[[], str]]  # a callable: help that names what is registered (--from)


class Option:
    """One option. `key` names the row (a command's variant of an option: `nodes:sweep`), `name`
    is the parameter the command's body gets it as. `kind`: str, int, float, gpus (an int that
    names -P for a word), flag (off by default), argument (a required positional). `field`: the
    JobSpec field it sets, `parse`: the option_values parser of its text, `yaml`: its kind as a
    project-file key (project_config), `text`: an empty value is refused. `helps`: another help
    for some commands (keys: command names, space-separated)."""

    __slots__ = (
        *("key", "name", "flags", "metavar", "help", "kind", "many", "default", "field", "parse"),
        *("yaml", "text", "helps", "complete"),
    )

    def __init__(
        self,
        key: str,
        flags: Tuple[str, ...],
        metavar: Optional[str],
        help: Help,
        *,
        kind: str = "str",
        many: bool = False,
        default: Any = None,
        field: Optional[str] = None,
        parse: Optional[str] = None,
        yaml: Optional[str] = None,
        text: bool = False,
        helps: Optional[Dict[str, str]] = None,
        complete: bool = False,
    ) -> None:
        self.key, self.name = key, key.split(":")[0]
        self.flags, self.metavar, self.help, self.kind, self.many = flags, metavar, help, kind, many
        self.default: Any = [] if many else (False if kind == "flag" else default)
        self.field, self.parse, self.yaml, self.text = field, parse, yaml, text
        self.helps = {cmd: h for cmds, h in (helps or {}).items() for cmd in cmds.split()}
        self.complete = complete  # cluster names complete it in the shell

    @property
    def takes_value(self) -> bool:
        return self.kind != "flag"

    @property
    def label(self) -> str:
        """How a message names it: its first flag (a project-file-only field: --name-of-field)."""
        return self.flags[0] if self.flags else "--" + (self.field or self.name).replace("_", "-")

    def help_in(self, command: str) -> str:
        text = self.helps.get(command, self.help)
        return text if isinstance(text, str) else text()


def _job(key: str, flags: Tuple[str, ...], metavar: Optional[str], help: Help, **kw: Any) -> Option:
    """A row that sets the JobSpec field of its name (unless `field` says another)."""
    kw.setdefault("field", key.split(":")[0])
    return Option(key, flags, metavar, help, **kw)


_CLUSTER = "cluster profile name (default: local)"
_GROUP = "accounting group/project"
_IN_JOB = "NAME=VALUE exported in the job"
_LOGIN = "submit over SSH on this host"
_DIRECTIVE = "extra scheduler directive (repeatable)"
_RUNS = "where the job runs and logs"
_VENV = "virtualenv to activate in the job"
_SHOW = "print the script (stdout) and the submit command (stderr); touch nothing"
_ALL = "every line, the frameworks' chatter too (the log file always has it)"

# fmt: off
JOB = (
    _job(
        "cluster", ("--cluster", "-c"), "NAME", _CLUSTER, yaml="text", text=True, complete=True,
        helps={
            "rerun": "where to run it (default: the job's own cluster)",
            "run": "the cluster profile, for an allocation hpc-launch did not open (your own salloc)",
            "hostfile": "take slots from this cluster profile",
        },
    ),
    _job(
        "nodes", ("--nodes", "-n"), "N", "number of nodes (default 1; pods: all --hosts)", kind="int", yaml="count",
        helps={"tune": "nodes of the one job", "rerun": "number of nodes (default: the job's)",
               "where": "number of nodes (default 1)"},
    ),
    _job(
        "gpus_per_node", ("--gpus-per-node", "-g"), "N", "GPUs (ranks) per node; default: all of the node's",
        kind="gpus", yaml="gpus",
        helps={"sweep tune": "GPUs (ranks) per node",
               "rerun": "GPUs (ranks) per node (default: the job's, if the node has them)"},
    ),
    _job("queue", ("--queue", "-q"), "QUEUE", "queue / partition / resource type", yaml="text", text=True),
    _job(
        "walltime", ("--walltime", "-t"), "TIME", "HH:MM:SS (or 90m, 2h)", yaml="time", text=True,
        helps={"sweep": "per point", "tune": "the one job's, all trials", "rerun": "HH:MM:SS (default: the job's)"},
    ),
    _job(
        "group", ("--group", "--project", "-P"), "GROUP", _GROUP + ", however the site spells it", yaml="text",
        text=True, helps={"sweep tune": _GROUP, "rerun": _GROUP + " on the new cluster"},
    ),
    _job(
        "name", ("--name", "-N"), "NAME", "job name (the log is NAME.oJOBID)", yaml="text", text=True,
        helps={"rerun": "job name (default: the job's)", "where": "job name",
               "run": "the run's name (default: the allocation's, -run1, -run2, ...)"},
    ),
    _job("name:sweep", ("--name", "-N"), "NAME", "job name; the sweep's id is NAME-TIMESTAMP", default="sweep"),
    _job("name:tune", ("--name", "-N"), "NAME", "job name; the tune's id is NAME-TIMESTAMP", default="tune"),
    _job(
        "modules", ("--modules",), "A,B", "comma-separated modules to load (replaces the profile's)",
        parse="split_list", yaml="words",
        helps={"rerun": "modules to load (default: the new cluster's profile's)",
               "where": "comma-separated modules to load"},
    ),
    _job(
        "env", ("--env", "-e"), "NAME=VALUE", _IN_JOB + " (repeatable; written into the script)", many=True,
        parse="parse_env", yaml="env",
        helps={"sweep": "NAME=VALUE exported in every job (repeatable)", "tune": _IN_JOB + " (repeatable)",
               "rerun": _IN_JOB + ", besides the job's (repeatable)", "where": _IN_JOB,
               "run": "NAME=VALUE exported for this run (repeatable)"},
    ),
    _job(
        "pass_env", ("--pass-env",), "NAME",
        "NAME of a variable set in this shell (a secret): the job gets it from a file only you can read (repeatable)",
        many=True, parse="list", yaml="names",
        helps={"rerun": "another secret's NAME, besides the job's (repeatable)",
               "where": "NAME of a variable set in this shell (a secret), as submit takes it (repeatable)"},
    ),
    _job(
        "notify", ("--notify",), "NAME",
        "NAME of a variable set in this shell holding a webhook URL (Slack, Mattermost, ntfy): "
        "the job posts its start and end there; the URL travels as a --pass-env secret", yaml="text", text=True,
        helps={"where": "NAME of a variable set in this shell holding a webhook URL, as submit takes it"},
    ),
    _job(
        "script", ("--script",), "FILE", "your own training script instead of `python -m hpc_launch.train`",
        yaml="text", text=True,
        helps={"rerun": "this script instead of the capsule's copy of the job's code",
               "where": "your own training script"},
    ),
    _job(
        "train_args", ("--train-args",), "'ARGS'", "arguments for the training entrypoint, as one shell-quoted string",
        parse="split_args", yaml="args",
        helps={"sweep": "the other training arguments, shared by every point",
               "tune": "the other training arguments, shared by every trial",
               "rerun": "training arguments instead of the job's", "where": "arguments for the training entrypoint"},
    ),
    _job(
        "directive", ("--directive", "-d"), "'DIRECTIVE'",
        "extra scheduler directive; replaces a default with the same key (repeatable)", many=True, field="directives",
        parse="list", yaml="lines", helps={"sweep rerun where": _DIRECTIVE},
    ),
    _job("hosts", ("--hosts",), "HOSTS", "pods: comma-separated node names/IPs", parse="expand_hosts", yaml="words"),
    _job(
        "gather", ("--gather",), "PORT", "pods: the other hosts' addresses come at start-up from "
        "`hpc-launch announce` on them", kind="int", yaml="port",
    ),
    _job(
        "workdir", ("--workdir",), "DIR", _RUNS + " (default: here, or ~/hpc-launch/NAME remotely)", yaml="text",
        text=True,
        helps={"sweep": "where the jobs run and log", "tune rerun": _RUNS, "where": "where the job would run and log"},
    ),
    _job(
        "venv", ("--venv",), "DIR", _VENV, yaml="text", text=True,
        helps={"sweep": "virtualenv to activate in the jobs"},
    ),
    _job("conda", (), None, "", yaml="text", text=True),  # a project-file key only
    _job(
        "login", ("--login",), "HOST", _LOGIN + " (~/.ssh/config alias); `local` forces this machine", yaml="text",
        text=True,
        helps={"sweep tune": _LOGIN + " (~/.ssh/config alias)", "rerun": _LOGIN,
               "where": "ask over SSH on this host"},
    ),
    _job(
        "stop_before", ("--stop-before",), "TIME",
        "checkpoint and stop this long before the walltime (default: a tenth of it, 30 s to 5 min)", yaml="time",
        text=True,
    ),
    _job(
        "chain", ("--chain",), "N",
        "N dependent jobs, each resuming from the newest checkpoint (for trainings longer than a walltime)",
        kind="int", yaml="count", helps={"rerun": "N dependent jobs (default: the job's)"},
    ),
    _job(
        "exclude", ("--exclude", "-x"), "HOSTS",
        "keep the job off these hosts (comma-separated or a hostlist); hosts a job found bad are added by themselves",
        parse="expand_hosts", helps={"where": "keep the job off these hosts"},
    ),
    _job(
        "spares", ("--spares",), "K", "hold K extra nodes and train on the first --nodes that pass the "
        "start-up check (for schedulers that cannot exclude hosts, e.g. PBS)", kind="int",
        helps={"where": "hold K extra nodes"},
    ),
    _job(
        "failover", ("--failover",), "N", "hold N spare nodes; when the pre-flight gate or the watchdog finds a bad "
        "node, the ranks restart from the newest checkpoint on the healthy nodes plus a spare, in the same job "
        "(up to N times)", kind="int",
    ),
    _job(
        "stage_env", ("--stage-env",), None, "copy the job's virtualenv to node-local storage (the profile's "
        "stage.dest) by a tree broadcast before the ranks start, and run them from the copy (docs/staging.md)",
        kind="flag",
    ),
    _job(
        "stage_data", ("--stage-data",), "DIR",
        "a shared directory staged too; the job finds the copy in $HPC_LAUNCH_STAGED_DATA",
    ),
    Option("no_stage", ("--no-stage",), None, "no node-local staging for this job, whatever the profile", kind="flag"),
    _job(
        "container", ("--container",), "IMAGE", "run the ranks inside this image (a path where the job runs, or a "
        "registry name), started by the site's launcher as the profile's container: says (docs/containers.md)",
        text=True, yaml="text",
        helps={"sweep": "run every point's ranks inside this image (docs/containers.md)",
               "rerun": "run the ranks inside this image (default: the job's image, from its capsule)",
               "where": "the ranks would run inside this image (the profile's container: is checked)"},
    ),
    _job(
        "no_preflight", ("--no-preflight",), None, "skip the pre-flight gate the ranks pass before training "
        "(the entrypoint's and a --script's: docs/preflight.md)", kind="flag", field="preflight", parse="off",
    ),
    _job(
        "stop_signal", ("--stop-signal",), "SIG", "the signal each rank of a --script gets at --stop-before "
        "(default USR1; also USR2, HUP, URG, XCPU): docs/rank-layer.md", text=True,
    ),
)

# the commands' own options (no JobSpec field)
OWN = (
    Option("config", ("--config",), "FILE", "project config file (default: ./hpc-launch.yaml if present)"),
    Option(
        "profile", ("--profile",), "FILE", "an extra cluster profile YAML file, merged last (repeatable)", many=True,
    ),
    Option(
        "dry_run", ("--dry-run",), None, _SHOW, kind="flag",
        helps={"sweep": "check every point and print what would be submitted; submit nothing",
               "tune": "check and print the job; submit nothing"},
    ),
    Option(
        "follow", ("--follow", "-f"), None, "follow the log until the job ends; exit with its exit code", kind="flag",
    ),
    Option("show_all", ("--all", "-a"), None, "with --follow: " + _ALL, kind="flag", helps={"run": _ALL}),
    Option(
        "no_check", ("--no-check",), None,
        "submit without asking the scheduler to validate the job first (sbatch --test-only, qsub -w v)", kind="flag",
    ),
    Option(
        "no_shell", ("--no-shell",), None,
        "hold the allocation in a detached tmux session and return; attach to it later", kind="flag",
    ),
    Option("detach", ("--detach",), None, "start the run and return (follow it with `logs -f`)", kind="flag"),
    # sweep and tune
    Option("zero", ("--zero",), "0,1,2,3", "ZeRO stages, comma-separated: 0,1,2,3"),
    Option("zero:tune", ("--zero",), "0,1,2,3", "ZeRO stages to try, comma-separated", default="1,2,3"),
    Option("offload", ("--offload",), "LIST", "offloads: none,optimizer,optimizer+params"),
    Option("offload:tune", ("--offload",), "LIST", "offloads: none,optimizer,optimizer+params", default="none"),
    Option("precision", ("--precision",), "LIST", "precisions: fp32,bf16,fp16"),
    Option("nodes:sweep", ("--nodes", "-n"), "N", "node counts, comma-separated"),
    Option("micro_batch", ("--micro-batch",), "N,N", "per-rank micro-batches, comma-separated"),
    Option(
        "micro_batch:tune", ("--micro-batch",), "LOW-HIGH", "the micro-batch range bisected for each choice",
        default="1-256",
    ),
    Option(
        "mem_limit", ("--mem-limit",), "GIB",
        "a trial whose rank's peak memory (peak RSS on CPU) goes above this counts as out of memory", kind="float",
    ),
    Option(
        "grid", ("--grid",), "FILE", "a YAML sweep file: axes (lists) and/or points: (flags win over its axes)"
    ),
    Option("separate", ("--separate",), None, "one job per point even where the scheduler has arrays", kind="flag"),
    Option(
        "pack", ("--pack",), None, "every point inside ONE job (one queue wait), one after another; -t is that job's",
        kind="flag",
    ),
    Option(
        "resume", ("--resume",), "SWEEP_ID", "with --pack: run the points a cut packed sweep did not finish"
    ),
    Option(
        "resume:tune", ("--resume",), "TUNE_ID", "go on with a cut tune: its journal's trials are not run again"
    ),
    Option(
        "out", ("--out", "-o"), "DIR", "the report's folder (default: ./SWEEP_ID)",
        helps={"tune": "the report's folder (default: ./TUNE_ID)"},
    ),
    Option(
        "no_wait", ("--no-wait",), None, "submit and return; `hpc-launch report SWEEP_ID` later", kind="flag",
        helps={"where": "with --submit: return once submitted (each job's start gate still lets one train)"},
    ),
    # rerun and where
    Option("job_id", (), "JOB_ID", "the job to run again (as printed by submit)", kind="argument"),
    Option("from_cluster", ("--from",), "NAME", "the job's cluster, when its id exists on several"),
    Option(
        "cluster:where", ("--cluster", "-c"), "A,B", many=True, complete=True,
        help="the clusters to ask (repeatable or comma-separated; default: the project's, else local)",
    ),
    Option("as_json", ("--json",), None, "a JSON list, one object per cluster", kind="flag"),
    Option(
        "submit_first", ("--submit",), None,
        "submit to every cluster that takes the job; the first to start trains, the others are cancelled", kind="flag",
    ),
    # hostfile (inside every job)
    Option("output", ("--output", "-o"), "FILE", "write here (atomically) instead of stdout"),
    Option(
        "slots", ("--slots",), "N", "slots (GPUs) per node; default: with --cluster the profile's GPUs, "
        "else as often as the node list names a host", kind="int",
    ),
    Option("source", ("--from",), "SCHEDULER", lambda: _schedulers()),
    Option("nodefile", ("--nodefile",), "FILE", "read this node file (one host per line)"),
    Option("hosts:hostfile", ("--hosts",), "HOSTS", "comma-separated hosts"),
    Option("include", ("--include", "-i"), "H1@H2", "keep only these hosts: host1@host2 (DeepSpeed syntax)"),
    Option("exclude:hostfile", ("--exclude", "-x"), "H1@H2", "drop these hosts: host1@host2 (DeepSpeed syntax)"),
)

# fmt: on


def _schedulers() -> str:
    from . import dialects

    return f"scheduler whose node list to read: {', '.join(dialects.scheduler_names())}"


ROWS: Dict[str, Option] = {row.key: row for row in JOB + OWN}

_SUBMIT = (
    "cluster nodes gpus_per_node queue walltime group name modules env pass_env notify script train_args directive "
    "hosts gather workdir venv login config profile stop_before chain exclude spares failover stage_env stage_data "
    "no_stage container no_preflight stop_signal dry_run follow show_all no_check"
).split()
# submit's options that only a batch job has: a chain, following its log, the start-up gather,
# node-local staging, notifications, validation by the batch command
BATCH_ONLY = (
    "chain follow show_all gather spares failover stage_env stage_data no_stage notify no_check train_args script"
)

# each command's rows, in its help's order
COMMANDS: Dict[str, Tuple[str, ...]] = {
    name: tuple(keys.split())
    for name, keys in {
        "submit": " ".join(_SUBMIT),
        "alloc": " ".join(k for k in _SUBMIT if k not in BATCH_ONLY.split()) + " no_shell",
        "sweep": "cluster zero offload precision nodes:sweep micro_batch grid train_args gpus_per_node queue walltime "
        "group name:sweep env directive workdir venv login container config profile separate pack resume out no_wait "
        "dry_run",
        "tune": "cluster zero:tune offload:tune micro_batch:tune mem_limit train_args nodes gpus_per_node queue "
        "walltime group name:tune env workdir venv login config profile resume:tune out dry_run",
        "rerun": "job_id cluster from_cluster nodes gpus_per_node queue walltime group name modules env pass_env "
        "script train_args directive hosts workdir venv login profile container chain dry_run",
        "where": "cluster:where nodes gpus_per_node queue walltime group name modules env pass_env notify script "
        "train_args directive hosts workdir venv login container config profile exclude spares as_json submit_first "
        "no_wait",
        "run": "script train_args env name cluster config detach show_all",
        "hostfile": "output slots cluster source nodefile hosts:hostfile include exclude:hostfile",
    }.items()
}


def of(command: str) -> Iterator[Option]:
    """The command's options, in its help's order."""
    return (ROWS[key] for key in COMMANDS[command])


def commands_taking(key: str) -> Tuple[str, ...]:
    return tuple(name for name, keys in COMMANDS.items() if key in keys)


def job_rows() -> Iterator[Option]:
    """Every row that sets a JobSpec field, once per field (a command's variant shares its field)."""
    seen = set()
    for row in JOB:
        if row.field and row.field not in seen:
            seen.add(row.field)
            yield row


def text_options() -> Dict[str, str]:
    """JobSpec field -> the option that sets it, for each given as text: an empty one is refused."""
    return {str(row.field): row.label for row in job_rows() if row.text}
