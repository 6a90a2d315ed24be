"""What the job's environment holds: the modules it loads, its variables (--env, the profile's
env:, the rank layer's), and the secrets that reach it in a 0600 file instead (--pass-env, --notify)."""

from __future__ import annotations

import os
import re
from typing import Dict, List, Optional, Tuple

from ..site import launchers
from ..errors import SpecError
from ..site.profiles import Profile
from ..protocol import ENV_PREFLIGHT, ENV_STOP_SIGNAL
from ..spec import JobSpec
from .common import CONTROL, ENV_KEY, check_token

# in a --notify URL: C0, DEL, C1 and the line separators (a CR/LF would split a request or a mail header)
_URL_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_DS_ENV_UNSAFE = re.compile(r'["$`\\]')  # DeepSpeed's pdsh runner only wraps values in "..."
# Names whose values must not be written into a job script (it is copied, kept, often world-readable).
_SECRET = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL)", re.I)

# Signals a rank may be asked to stop with: catchable, and none that means something else to a
# Python process or a launcher (INT is Ctrl-C, TERM the scheduler's kill, CHLD/SEGV/... the kernel's).
STOP_SIGNALS = ("SIGUSR1", "SIGUSR2", "SIGHUP", "SIGURG", "SIGXCPU")


def modules_of(spec: JobSpec, p: Profile) -> List[str]:
    """--module names (replacing the profile's list when given), each a plain word."""
    modules = list(p.modules.load if spec.modules is None else spec.modules)
    for mod in modules:
        check_token(mod, "module", "module names are plain words like cuda/12.6")
    return modules


def layer_env(spec: JobSpec) -> Dict[str, str]:
    """--no-preflight and --stop-signal, as the variables every rank reads (protocol.ENV_PREFLIGHT,
    protocol.ENV_STOP_SIGNAL), so each launcher hands them on as it hands on --env."""
    env: Dict[str, str] = {}
    if spec.preflight is False:
        env[ENV_PREFLIGHT] = "0"
    if spec.stop_signal is not None:
        name = str(spec.stop_signal).strip().upper()
        name = name if name.startswith("SIG") else f"SIG{name}"
        if name not in STOP_SIGNALS:
            raise SpecError(
                f"--stop-signal {spec.stop_signal}: not a signal a rank can be asked to stop with",
                hint=f"use one of {', '.join(s[3:] for s in STOP_SIGNALS)} (default USR1)",
            )
        env[ENV_STOP_SIGNAL] = name
    return env


def environment_of(spec: JobSpec, p: Profile, launcher: launchers.Launcher) -> Dict[str, str]:
    """The profile's env:, --env over it, the rank layer's variables; each one the launcher can carry,
    and none named like a secret (those go by --pass-env)."""
    env = dict(p.env)
    env.update(spec.env or {})
    env.update(layer_env(spec))
    assert isinstance(spec.nodes, int)  # the nodes rule ran first
    for key, value in env.items():
        if not ENV_KEY.match(key):
            raise SpecError(
                f"environment variable name {key!r} is not valid",
                hint="use --env NAME=VALUE with NAME made of letters, digits and _",
            )
        if "\x00" in str(value):
            raise SpecError(f"the value of {key} contains a NUL byte")
        if launcher.env_file and CONTROL.search(str(value)):
            # .deepspeed_env is line-based: one KEY=VALUE per line, nothing else
            raise SpecError(
                f"the value of {key} contains a newline or control "
                "character, which DeepSpeed's .deepspeed_env cannot carry"
            )
        if (
            launcher.env_via_shell
            and spec.nodes > 1
            and (_DS_ENV_UNSAFE.search(str(value)) or str(value) != str(value).strip())
        ):
            # DeepSpeed's pdsh runner writes `export KEY="VALUE";` into the remote shell command
            raise SpecError(
                f"the value of {key} holds \" $ ` \\ or leading/trailing spaces: DeepSpeed's pdsh launcher hands it "
                'to the other nodes\' shell inside "...", which would expand or cut it',
                hint=f"drop those characters from {key}, or use --nodes 1",
            )

    for key in env:
        if _SECRET.search(key):
            raise SpecError(
                f"--env {key}=... would write a secret into the job script",
                hint=(
                    f"export {key} in your shell and pass --pass-env "
                    f"{key}: it reaches the job in a file only you can read"
                ),
            )
    return env


def secrets_of(spec: JobSpec, env: Dict[str, str], launcher: launchers.Launcher) -> Tuple[List[str], Optional[str]]:
    """--pass-env names and the --notify variable: values travel in a 0600 file the job reads and
    deletes (hpc_launch/secrets.py); a webhook URL is a secret (anyone holding it can post)."""
    pass_env = list(dict.fromkeys(spec.pass_env or []))
    notify = spec.notify.strip() if spec.notify else None
    if notify and notify not in pass_env:
        pass_env.append(notify)
    for key in pass_env:
        _check_secret_name(key, "--notify" if key == notify else "--pass-env", env, notify)
    assert isinstance(spec.nodes, int)  # the nodes rule ran first
    if pass_env and launcher.env_file and spec.nodes > 1:
        # DeepSpeed's multi-node runner puts what it forwards on a command line: pdsh's
        # `export K=V; ...`, mpirun's `-x K=V` (deepspeed/launcher/multinode_runner.py)
        raise SpecError(
            f"--pass-env with --nodes {spec.nodes}: the {launcher.name} launcher can hand variables to other nodes "
            "only on their command line, readable in ps by every user there",
            hint="use --nodes 1 (one node runs without it), or a profile with launch.launcher mpirun or srun",
        )
    return pass_env, notify


def _check_secret_name(key: str, opt: str, env: Dict[str, str], notify: Optional[str]) -> None:
    if not ENV_KEY.match(key):
        raise SpecError(f"{opt} {key!r} is not a variable name")
    if key.upper().startswith("HPC_LAUNCH_"):
        raise SpecError(
            f"{opt} {key}: names starting with HPC_LAUNCH_ belong to the job script",
            hint="pass the value under another name",
        )
    if key in env:
        raise SpecError(
            f"{key} is given both as --env (or in the profile's env:) and as {opt}",
            hint=f"drop one of them; a secret belongs in --pass-env {key}",
        )
    if key not in os.environ:
        raise SpecError(f"{opt} {key}: it is not set in this shell", hint=f"export {key}=... first")
    if key == notify and _URL_CONTROL.search(os.environ[key]):
        raise SpecError(  # never the value: it is the secret
            f"--notify {key}: its value holds a control character (a line break, tab or escape), which no URL has",
            hint=f"set {key} to the webhook URL or mail address form alone, on one line",
        )
