"""Render a ResolvedJob into a JobScript: the script text and the exact submit command.

Shell safety is structural: the Jinja environment quotes EVERY value it prints (`finalize`
runs shlex.quote), the way HTML templates autoescape. Only `Sh` strings pass through as they
are, and `Sh` is built here from quoted parts or from profile lines that are shell by design
(modules.init, modules.after, conda_setup). Directive lines are comments to the shell but the scheduler reads
them, so they are checked to be single lines before they get near a template.
"""

from __future__ import annotations

import os
import re
import shlex
from typing import Any, Dict, Iterable, List, Optional

import msgspec
from msgspec import field
from msgspec.structs import replace

from . import __version__, dialects, protocol
from .site import launchers
from .errors import SpecError, TemplateError
from .protocol import SCRIPT_DIR, link_script_name
from .resolve import ResolvedJob
from .dialects import Arrays, ChainHandOff, Dialect, HostExclusion, RestartNotice


class Sh(str):
    """A string that is already valid shell and is printed as is."""


def q(value) -> Sh:
    return Sh(shlex.quote(str(value)))


def qjoin(values: Iterable) -> Sh:
    return Sh(" ".join(shlex.quote(str(v)) for v in values))


def _finalize(value):
    if isinstance(value, Sh):
        return value
    if value is None:
        return Sh("")
    return shlex.quote(str(value))


def path_expr(path: str) -> Sh:
    """A path as shell: `~/x` keeps its meaning ("$HOME"/x), everything else is quoted."""
    if path == "~":
        return Sh('"$HOME"')
    if path.startswith("~/"):
        return Sh('"$HOME"/' + shlex.quote(path[2:]))
    return q(path)


def pattern_expr(pattern: str, literals: Dict[str, str], variables: Dict[str, str]) -> Sh:
    """`{name}.o{job_num}` -> 'train'.o"${JOB_NUM}" : literal parts quoted, variables expanded."""
    out = []
    for piece in re.split(r"({\w+})", pattern):
        if not piece:
            continue
        key = piece[1:-1] if piece.startswith("{") and piece.endswith("}") else None
        if key in variables:
            out.append(f'"${{{variables[key]}}}"')
        elif key in literals:
            out.append(shlex.quote(str(literals[key])))
        else:
            out.append(shlex.quote(piece))
    return Sh("".join(out))


def comment(text) -> Sh:
    """Text for a `#` comment line: nothing in it may start a new line."""
    return Sh(re.sub(r"[\x00-\x1f\x7f]+", " ", str(text)))


def fill(template: str, values: Dict[str, object]) -> str:
    return re.sub(r"{(\w+)}", lambda m: str(values[m.group(1)]), template)


class JobScript(msgspec.Struct):
    text: str
    submit_argv: List[str]
    script_name: str  # file name inside WORKDIR/.hpc-launch/
    job: ResolvedJob
    stamp: str
    # what the submit command was built from, so a chain link's command is built the same way
    submit_flags: List[str] = field(default_factory=list)
    log_prefix: str = ""

    @property
    def script_relpath(self) -> str:
        return f"{SCRIPT_DIR}/{self.script_name}"

    @property
    def capsule_relpath(self) -> str:
        """What was submitted, shared by every link of a chain (hpc_launch/capsule.py)."""
        return protocol.capsule_relpath(self.job.name, self.stamp)

    def link(self, link: int) -> "JobScript":
        """Link `link` (2, 3, ...) of a chain: the same script under its own name."""
        name = link_script_name(self.script_name, link)
        return replace(
            self,
            text=self.text.replace(self.script_name, name),
            script_name=name,
            submit_argv=self.submit_argv_for(f"{SCRIPT_DIR}/{name}"),
        )

    def submit_argv_for(self, script_path: str, depend_on: Optional[str] = None) -> List[str]:
        """This job's submit command for `script_path`, held until `depend_on` ends (a chain)."""
        p = self.job.profile
        argv = dialects.get(p.dialect).submit_argv(
            script_path, submit_flags=self.submit_flags, log_prefix=self.log_prefix, depend_on=depend_on
        )
        return dialects.with_site_commands(argv, p.commands)

    def held_submit_argv(self, depend_on: str) -> List[str]:
        return self.submit_argv_for(self.script_relpath, depend_on)


_ENV = None


def _bytecode_cache(jinja2):
    """Compiled templates cached on disk: compiling them is most of a cold dry-run's work."""
    try:
        from .paths import user_dir

        directory = os.path.join(user_dir("cache"), f"jinja-{__version__}")
        os.makedirs(directory, exist_ok=True)
        return jinja2.FileSystemBytecodeCache(directory)
    except OSError:  # read-only home: compile every time
        return None


def _loader(jinja2, searchpath: List[str]):
    """jinja2's loader skips whatever is not a file, so an override that is a directory (or a
    FIFO, a dangling link) would quietly give the shipped template: refuse it instead."""
    from jinja2.loaders import split_template_path

    class Loader(jinja2.FileSystemLoader):
        def get_source(self, environment, template):
            for directory in self.searchpath:
                filename = os.path.join(directory, *split_template_path(template))
                if os.path.lexists(filename):
                    if not os.path.isfile(filename):
                        kind = "a directory" if os.path.isdir(filename) else "not a regular file"
                        raise TemplateError(
                            f"template override {filename} is {kind}",
                            hint="make it a template file, or remove it to use the shipped one",
                        )
                    break
            return super().get_source(environment, template)

    return Loader(searchpath)


def _environment():
    global _ENV
    if _ENV is None:
        import jinja2

        from .paths import templates_dirs

        _ENV = jinja2.Environment(
            loader=_loader(jinja2, [str(p) for p in templates_dirs()]),
            bytecode_cache=_bytecode_cache(jinja2),
            finalize=_finalize,
            trim_blocks=True,
            lstrip_blocks=True,
            keep_trailing_newline=True,
            undefined=jinja2.StrictUndefined,
            autoescape=False,
        )
        _ENV.filters["q"] = q
        _ENV.filters["qjoin"] = qjoin
        _ENV.filters["comment"] = comment
    return _ENV


def directive_lines(job: ResolvedJob) -> List[str]:
    p = job.profile
    dialect = dialects.get(p.dialect)
    values = job.placeholders()
    optional = {k for k in ("queue", "group") if not values.get(k)}
    defaults = [fill(d, values) for d in p.directives if not optional & set(re.findall(r"{(\w+)}", d))]
    if job.group and p.group.where == "directive":
        defaults.append(fill(p.group.flag, values))
    if p.stage.on:  # the node-local disk is granted only on request (Frontier's NVMe: -C nvme)
        defaults += [fill(d, values) for d in p.stage.directives]
    if job.container and p.container:  # what the site asks of a container job (Polaris: -l singularity_fakeroot=true)
        defaults += [fill(d, values) for d in p.container.directives]
    lines = dialect.merge_directives(defaults, job.spec.directives)
    for line in lines:
        if re.search(r"[\x00-\x1f\x7f]", line):
            raise SpecError(
                f"directive {line!r} would span lines", hint="remove newlines from names, queues and --directive values"
            )
    return lines


def submit_flags(job: ResolvedJob) -> List[str]:
    p = job.profile
    flags: List[str] = []
    if job.group and p.group.where == "submit":
        flags += shlex.split(fill(p.group.flag, job.placeholders()))
    dialect = dialects.get(p.dialect)
    # hosts the job must avoid ride on the command line, not in the script: a chain's later link
    # or a resubmission can avoid hosts found bad after this script was written
    avoid = dialect.exclude_flags(job.exclude) if isinstance(dialect, HostExclusion) else []
    return flags + dialect.submit_flags(job.name) + avoid


def _render_template(name: str, context: dict) -> str:
    """A broken template (most often a user's override) is one line naming the file and line."""
    import jinja2

    try:
        return _environment().get_template(name).render(**context)
    except jinja2.TemplateSyntaxError as exc:
        where = f"{exc.filename or exc.name}, line {exc.lineno}"
        raise TemplateError(f"template {where}: {exc.message}", hint=_template_hint(exc.filename)) from None
    except jinja2.TemplateError as exc:
        raise TemplateError(f"template {name} could not be rendered: {exc}", hint=_template_hint(None)) from None


def _template_hint(filename: Optional[str]) -> str:
    from .paths import user_config_dir

    user = user_config_dir() / "templates"
    if filename is None or str(filename).startswith(str(user)):
        return f"fix or remove your override in {user}"
    return "this is a bug in hpc-launch's shipped templates: please report it"


def script_name(job: ResolvedJob, stamp: str) -> str:
    return f"{job.name}-{stamp}.sh"


def launch_entry(job: ResolvedJob, *, deepspeed_launcher: bool) -> Sh:
    if job.script:
        # through the job layer when the job's Python has it (templates/body/launch/_layer.sh.j2)
        return Sh('${HPC_LAUNCH_LAYER[@]+"${HPC_LAUNCH_LAYER[@]}"} ' + path_expr(job.script))
    return Sh('"$HPC_TRAIN"')  # set by the script from the installed package (templates/body/job.sh.j2)


def _container_context(job: ResolvedJob, python: str, *, deepspeed_cli: bool) -> Dict[str, object]:
    """What the launch templates put before the rank command (`container_exec`; `ds_container` for
    DeepSpeed's launchers, which start `--no_python` ranks) and on srun's line (pyxis)."""
    c = job.profile.container if job.container else None
    if c is None or job.container is None:
        return dict(container=None, container_exec=Sh(""), ds_container=Sh(""), container_srun=Sh(""))
    from . import container

    staged = bool(job.profile.stage.image)  # the node-local copy (templates/body/stage.sh.j2)
    prefix = container.exec_prefix(
        c, job.container, workdir=job.workdir, pass_env=job.pass_env, env=job.env, staged=staged
    )
    return dict(
        container=c,
        container_image=job.container,
        container_exec=Sh(prefix),
        # DeepSpeed's launcher runs `--no_python` ranks as given: the runtime, then the job's Python inside
        ds_container=Sh(f"--no_python --no_local_rank {prefix}{python} -u ") if deepspeed_cli else Sh(""),
        container_srun=Sh(container.srun_options(c, job.container, workdir=job.workdir, staged=staged)),
        container_program=container.PROGRAMS.get(c.runtime),
        # site data checked by the schema to hold no quote, backslash or command substitution: $VAR expands
        container_env=[(Sh(k), Sh(v)) for k, v in c.env.items()],
        container_file=None
        if container.is_reference(job.container, c.runtime)
        else Sh(container.path_word(container.job_path(job.container, job.workdir))),
    )


def render(
    job: ResolvedJob, *, stamp: str, array: Optional[List[List[str]]] = None, pack: Optional[Any] = None
) -> JobScript:
    """`array`: one job array whose task i runs the entrypoint with array[i] as its training
    arguments (a sweep); only for a dialect with arrays. `pack` (a pack.Packed): one job that runs
    every point in turn (`sweep --pack`, templates/body/pack.sh.j2), or a tune.Tuning: one job
    whose trials each training chooses (`tune`, templates/body/tune.sh.j2)."""
    p = job.profile
    dialect = dialects.get(p.dialect)
    name = script_name(job, stamp)
    # The submit command runs in the work dir: relative paths keep it the same whether the work
    # dir is absolute, `~/...` or resolved only on the login node (dry-run == submission).
    script_path = f"{SCRIPT_DIR}/{name}"
    log_prefix = f"{job.name}.o"  # where a dialect with no scheduler logs
    arrays = dialect if array and isinstance(dialect, Arrays) else None
    if array and arrays is None:
        raise TemplateError(f"{dialect.title} has no job arrays: submit the points one by one")
    flags = submit_flags(job) + (arrays.array_flags(len(array)) if arrays and array else [])
    argv = dialects.with_site_commands(
        dialect.submit_argv(script_path, submit_flags=flags, log_prefix=log_prefix), p.commands
    )
    launcher = launchers.get(p.launch.launcher)
    context = _scheduler_context(job, dialect, arrays, argv, name)
    context.update(_launch_context(job, launcher, stamp, array=array, packed=bool(pack)))
    context.update(_container_context(job, str(context["python"]), deepspeed_cli=launcher.deepspeed_cli))
    if pack:
        context.update(pack.context())
    text = _render_template(dialect.template, context)
    return JobScript(
        text=text, submit_argv=argv, script_name=name, job=job, stamp=stamp, submit_flags=flags, log_prefix=log_prefix
    )


def _scheduler_context(
    job: ResolvedJob, dialect: Dialect, arrays: Optional[Arrays], argv: List[str], name: str
) -> Dict[str, Any]:
    """What the script's header and prologue take from the scheduler: directives, the submit line,
    the job id and number, the log name, the node list, a restart's and a chain link's shell."""
    p = job.profile
    log_name = pattern_expr(p.log.name, {"name": job.name}, {"job_num": "JOB_NUM", "job_id": "JOB_ID"})
    directives = arrays.array_directives(directive_lines(job)) if arrays else directive_lines(job)
    return dict(
        proto=protocol,  # the job protocol: exit codes and file names, shared with the code that reads them
        version=__version__,
        job=job,
        script_name=name,
        profile=p,
        dialect=dialect,
        directives=[Sh(line) for line in directives] if dialect.has_scheduler else [],
        prefix=Sh(dialect.directive_prefix),
        submit_cmd=Sh(shlex.join(argv).replace("\n", " ")),
        workdir=path_expr(job.workdir),
        job_id_expr=Sh(dialect.job_id_expr),
        job_num_expr=Sh(arrays.array_job_num_expr if arrays else dialect.job_num_expr),
        log_name=log_name,
        tee=p.log.live == "tee",
        nodelist_shell=Sh(dialect.nodelist_shell),
        array_index=Sh(f"${{{arrays.array_index_var}:-}}") if arrays else None,
        array_first=arrays.array_first_index if arrays else 1,
        restarted=Sh(dialect.restarted_shell) if isinstance(dialect, RestartNotice) else None,
        preempted=Sh(dialect.preempted_shell)
        if isinstance(dialect, RestartNotice) and dialect.preempted_shell
        else None,
        keep_next_links_off=Sh(dialect.keep_dependents_off_shell)
        if job.chain > 1 and isinstance(dialect, ChainHandOff)
        else None,
    )


def _rank_env_keys(job: ResolvedJob) -> List[str]:
    """Names every rank must see, wherever the launcher starts it (mpirun -x, .deepspeed_env)."""
    keys = sorted(job.env) + [
        k
        for k in (
            "HPC_LAUNCH_DEADLINE",
            "HPC_LAUNCH_STOP",
            "HPC_LAUNCH_CHECKPOINT_DIR",
            protocol.ENV_BAD_HOSTS,
            protocol.ENV_VERDICT,  # the watchdog's and the gate's exit code for the job, from any node
            protocol.ENV_WORLD_SIZE,
            protocol.ENV_RANKS_PER_NODE,
        )
        if k not in job.env
    ]
    return [k for k in keys if not (job.profile.net_if and k in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"))]


def _launch_context(
    job: ResolvedJob, launcher: Any, stamp: str, *, array: Optional[List[List[str]]], packed: bool
) -> Dict[str, Any]:
    """What the body takes to start the ranks: modules and Python, the launcher and its entry, the
    training arguments (an array task's or a packed point's chosen in the script), the
    environment, hosts and spares, the capsule."""
    p = job.profile
    return dict(
        modules_init=Sh(p.modules.init) if p.modules.init else None,
        modules_after=Sh(p.modules.after) if p.modules.after else None,
        venv_path=path_expr(job.venv) if job.venv else None,
        conda_env=(path_expr(job.conda) if "/" in job.conda else q(job.conda)) if job.conda else None,
        conda_setup=Sh(p.python.conda_setup) if p.python.conda_setup else None,
        launcher=launcher,
        launcher_args=qjoin(p.launch.args),
        launcher_args_str=" ".join(shlex.quote(a) for a in p.launch.args),
        entry=launch_entry(job, deepspeed_launcher=launcher.deepspeed_cli),
        python=q(p.python.python) if not job.venv else Sh("python"),
        # an array task's arguments are its point's, chosen by its index (templates/body/job.sh.j2)
        train_args=Sh('"${HPC_LAUNCH_TRAIN_ARGS[@]}"') if array or packed else qjoin(job.train_args),
        array_points=[qjoin(args) for args in array or []],
        pack_points=[],
        tune_spec=None,
        env_items=[(Sh(k), job.env[k]) for k in sorted(job.env)],
        ds_env_keys=[Sh(k) for k in _rank_env_keys(job)],
        hosts=job.hosts,
        net_if=p.net_if,
        spares_check=q(protocol.interface_ok_shell(p.net_if)) if p.net_if else None,
        spares_tried_last=q(" " + " ".join(job.tried_last) + " "),  # spaces around each: a `case` pattern
        capsule=q(protocol.capsule_relpath(job.name, stamp)),
        import_from=path_expr(job.import_from) if job.import_from else None,
    )
