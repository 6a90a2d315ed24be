"""`--container IMAGE`: the ranks run inside a container image, started by the site's launcher
outside it (docs/containers.md).

The profile's `container:` says how the site does it (runtime, modules, binds, GPU flags); this
module turns that into the shell the launch templates put in front of the rank command (a prefix,
so whatever else starts the rank stays as it is), or into srun's own options for pyxis. The work
dir is always bound in at the same path, so checkpoints, logs and chains see the same files.
Values never pass through here: a `--pass-env` secret reaches the rank by inheritance (or
podman's `--env NAME`, which takes the value from the caller's environment), never on a line.
"""

from __future__ import annotations

import shlex
from typing import Any, Dict, Iterable, List, Optional

from msgspec.structs import replace

from .errors import SpecError
from .site.profiles import Container, Profile, Stage

WORKDIR = '"$WORKDIR"'  # the job script's work dir variable (templates/body/prologue.sh.j2)
STAGED_IMAGE = '"$HPC_LAUNCH_IMAGE"'  # the node-local copy's path, set by templates/body/container.sh.j2
# Variables a rank needs that podman does not pass by itself (it starts from the image's
# environment): the rendezvous, the job's protocol and every rank convention of hpc_launch/train/dist.py.
_PODMAN_PASS = (
    "MASTER_ADDR",
    "MASTER_PORT",
    "PYTHONPATH",
    "PYTHONUNBUFFERED",
    "WORLD_SIZE",
    "RANK",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_LOCALID",
    "SLURM_NNODES",
    "SLURM_NODEID",
    "SLURM_JOB_ID",
    "GLOO_SOCKET_IFNAME",
    "NCCL_SOCKET_IFNAME",
)


# The program each runtime runs per rank (pyxis is srun's own option: none)
PROGRAMS = {
    "apptainer": "apptainer",
    "singularity": "singularity",
    "charliecloud": "ch-run",
    "podman-hpc": "podman-hpc",
    "shifter": "shifter",
}


def is_reference(image: str, runtime: str) -> bool:
    """A registry or gateway name (docker://..., nvcr.io#..., podman's and Shifter's image names),
    not a file: the runtime finds it when the rank starts, nothing to check here."""
    if "://" in image or "#" in image:
        return True
    if runtime in ("podman-hpc", "shifter"):
        return not image.startswith(("/", "~", "./", "../"))
    return False


def job_path(image: str, workdir: str) -> str:
    """The image file as the job names it: relative names are in the work dir."""
    if image.startswith(("/", "~", "$")):
        return image
    return f"{workdir.rstrip('/')}/{image}"


def check_image_name(image: str) -> None:
    if not image.strip() or any(ord(c) < 32 or ord(c) == 127 for c in image):
        raise SpecError(
            "--container: the image name is empty or holds a control character",
            hint="give the image's path (a .sif file, a charliecloud directory, a .sqsh) or registry name",
        )


def container_of(profile: Profile, image: Optional[str]) -> Optional[Container]:
    """The site's container wiring for a job with `image`, checked; None without an image."""
    if not image:
        return None
    check_image_name(image)
    if profile.container is None:
        raise SpecError(
            f"--container: the {profile.name} profile has no `container:` section saying how its ranks run in an image",
            hint=(
                f"add container: {{runtime: apptainer, ...}} to ~/.config/hpc-launch/clusters/{profile.name}.yaml "
                "(docs/containers.md), or drop --container"
            ),
        )
    return profile.container


# Runtimes that run an image from a path (a SIF or sandbox, a squashfs, a directory), so a node-local
# copy can stand in for it; podman-hpc and Shifter run images by name from their own stores.
STAGEABLE = ("apptainer", "singularity", "charliecloud", "pyxis")


def staging(profile: Profile, image: Optional[str]) -> Stage:
    """The job's `stage:` with `image` decided: the image is staged to every node's local disk like
    the venv (hpc_launch/stage.py --entry) when the profile says `stage.image: true`, or leaves it
    unset and the job stages anything else; never for a registry name or a runtime that runs images
    by name."""
    st, c = profile.stage, profile.container
    wanted = st.image if st.image is not None else (st.env or st.data is not None)
    staged = bool(wanted and image and c and c.runtime in STAGEABLE and not is_reference(image, c.runtime))
    return replace(st, image=staged)


def staged_path(profile: Profile, record: Dict[str, Any]) -> str:
    """Where the job's copy of the image is, as the job names it ($VAR and {host} expand on each node):
    DEST/image/NAME, NAME the image's real name (hpc_launch/stage_nodes.entry_name)."""
    name = (record.get("real") or record["image"]).rstrip("/").rsplit("/", 1)[-1]
    return f"{profile.stage.dest}/image/{name}"


def _binds(c: Container) -> List[str]:
    return [b if ":" in b else f"{b}:{b}" for b in c.binds]


def _quoted(parts: Iterable[str]) -> str:
    return " ".join(p if p == WORKDIR else shlex.quote(p) for p in parts)


def path_word(path: str) -> str:
    """A path as one shell word: `~/x` and `$VAR/x` expand in the job, the rest is quoted."""
    if path.startswith("~/"):
        return '"$HOME"/' + shlex.quote(path[2:])
    if path.startswith("$"):
        head, _, rest = path.partition("/")
        name = head[1:].strip("{}")
        return f'"${{{name}}}"' + ("/" + shlex.quote(rest) if rest else "")
    return shlex.quote(path)


def _bind_words(flag: str, c: Container, sep: str = " ") -> List[str]:
    words = []
    for bind in _binds(c):
        src, dst = bind.split(":", 1)
        words.append(f"{flag}{sep}{path_word(src)}:{path_word(dst)}")
    words.append(f"{flag}{sep}{WORKDIR}:{WORKDIR}")
    return words


def image_word(c: Container, image: str, workdir: str, staged: bool = False) -> str:
    """The image as one shell word on the rank's line: the node-local copy's variable when staged."""
    if staged:
        return STAGED_IMAGE
    return path_word(job_path(image, workdir)) if not is_reference(image, c.runtime) else shlex.quote(image)


def exec_prefix(
    c: Container,
    image: str,
    *,
    workdir: str,
    pass_env: Iterable[str] = (),
    env: Iterable[str] = (),
    staged: bool = False,
) -> str:
    """The runtime's exec line that goes before the rank command (ending in a space), as shell;
    empty where the launcher starts the container itself (pyxis). `staged`: the node-local copy."""
    img = image_word(c, image, workdir, staged)
    gpu, args = _quoted(c.gpu_flags), _quoted(c.args)
    opts = " ".join(x for x in (gpu, args) if x)
    if c.runtime in ("apptainer", "singularity"):
        words = [c.runtime, "exec", opts, *_bind_words("-B", c), f"--pwd {WORKDIR}", img]
    elif c.runtime == "charliecloud":
        # ch-run passes the caller's environment through; -c: the rank starts in the work dir
        words = ["ch-run", opts, *_bind_words("-b", c), f"-c {WORKDIR}", img, "--"]
    elif c.runtime == "podman-hpc":
        names = list(dict.fromkeys([*_PODMAN_PASS, *env, *pass_env]))
        passed = " ".join(f"--env {n}" for n in names)  # NAME alone: the value comes from this environment
        words = ["podman-hpc run --rm", opts, *_bind_words("-v", c), f"-w {WORKDIR}", passed, img]
    elif c.runtime == "shifter":
        words = [f"shifter --image={img}", opts, *_bind_words("--volume", c, "="), f"--workdir={WORKDIR}", "--"]
    else:  # pyxis: srun's own options (srun_options)
        return ""
    return " ".join(w for w in words if w) + " "


def srun_options(c: Container, image: str, *, workdir: str, staged: bool = False) -> str:
    """pyxis: the options srun takes to start every task in the image (NVIDIA/pyxis wiki, Usage)."""
    if c.runtime != "pyxis":
        return ""
    img = image_word(c, image, workdir, staged)
    mounts = ",".join(
        [*(f"{path_word(s)}:{path_word(d)}" for s, d in (b.split(":", 1) for b in _binds(c))), f"{WORKDIR}:{WORKDIR}"]
    )
    words = [f"--container-image={img}", f"--container-mounts={mounts}", f"--container-workdir={WORKDIR}"]
    return " " + " ".join(words + [_quoted(c.gpu_flags), _quoted(c.args)]).strip()


DIGEST_MAX_BYTES = 64 << 20  # an image file this small is hashed at submit; a big one is recorded by size and time


def check_image(transport, job, workdir: str) -> Dict[str, Any]:
    """Before anything is written or submitted: the image is readable where the job will run
    (over the job's transport, SSH too). Returns what the capsule records of it."""
    image = job.container
    c = job.profile.container
    if is_reference(image, c.runtime):
        return {"image": image, "runtime": c.runtime, "reference": True}
    word = path_word(job_path(image, workdir))
    probe = (
        f'IMG={word}; [ -r "$IMG" ] || {{ echo "$IMG"; exit 4; }}; '
        'printf "%s\\n" "$IMG"; readlink -f -- "$IMG"; stat -L -c "%F|%s|%Y" -- "$IMG"; '
        f'if [ -f "$IMG" ] && [ "$(stat -L -c %s -- "$IMG")" -le {DIGEST_MAX_BYTES} ]; then sha256sum -- "$IMG"; fi'
    )
    result = transport.run(["bash", "-c", probe], timeout=120.0)
    lines = result.out.splitlines()
    if result.rc == 4:
        shown = lines[0] if lines else image
        raise SpecError(
            f"--container: image {shown} not found or not readable on {transport.host}",
            hint="give the image's path where the job runs (copy or pull it there first), or a registry name",
        )
    if result.rc != 0 or len(lines) < 3:
        raise SpecError(
            f"--container: cannot look at image {image} on {transport.host}: {result.err.strip() or result.rc}"
        )
    kind, size, mtime = (lines[2].split("|") + ["", "", ""])[:3]
    record: Dict[str, Any] = {"image": lines[0], "runtime": c.runtime, "kind": kind}
    if lines[1] != lines[0]:
        record["real"] = lines[1]  # what a link named: the file staged and run
    if kind.startswith("regular"):
        record["bytes"] = int(size)
    record["mtime"] = int(mtime) if mtime.isdigit() else None
    if len(lines) > 3 and lines[3].split():
        record["sha256"] = lines[3].split()[0]
    if job.profile.stage.image:  # the ranks run the node-local copy (templates/body/stage.sh.j2)
        record["staged"] = staged_path(job.profile, record)
    return record
