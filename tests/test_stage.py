"""Node-local staging (hpc_launch/stage.py): the tree broadcast over real sockets, one process per
"node". Nodes are loopback addresses 127.0.0.1..N (Linux answers the whole 127/8), each listening
on the same port as real nodes do; each writes its own {host} destination."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

import pytest

from hpc_launch import stage

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tree(tmp: Path, n: int) -> tuple:
    hosts = [f"127.0.0.{i + 1}" for i in range(n)]
    hostfile = tmp / "hostfile"
    hostfile.write_text("".join(f"{h} slots=1\n" for h in hosts))
    token = tmp / "token"
    token.write_text(os.urandom(16).hex())
    token.chmod(0o600)
    return hosts, hostfile, token


def _run_nodes(
    hostfile: Path, token: Path, src: Path, dest: str, n: int, *, extra: Dict[int, List[str]] = None, skip=()
) -> List[subprocess.CompletedProcess]:
    port = _free_port()
    procs = []
    for i in range(n):
        if i in skip:
            continue
        argv = [sys.executable, "-m", "hpc_launch.stage", "--hostfile", str(hostfile), "--src", str(src)]
        argv += ["--dest", dest, "--port", str(port), "--token-file", str(token), "--index", str(i)]
        argv += (extra or {}).get(i, ["--timeout", "20", "--idle", "20"])
        procs.append(subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    out = []
    for p in procs:
        o, e = p.communicate(timeout=60)
        out.append(subprocess.CompletedProcess(p.args, p.returncode, o, e))
    return out


def _tree_of(path: Path) -> Dict[str, object]:
    got: Dict[str, object] = {}
    for p in sorted(path.rglob("*")):
        rel = str(p.relative_to(path))
        if p.is_symlink():
            got[rel] = ("link", os.readlink(p))
        elif p.is_file():
            got[rel] = ("file", p.read_bytes(), p.stat().st_mode & 0o777)
        else:
            got[rel] = ("dir",)
    return got


@pytest.fixture
def src(tmp_path) -> Path:
    d = tmp_path / "src"
    (d / "pkg" / "sub").mkdir(parents=True)
    (d / "pkg" / "__init__.py").write_text("X = 1\n")
    (d / "pkg" / "sub" / "data.bin").write_bytes(os.urandom(3 * stage.CHUNK + 12345))  # several frames
    (d / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (d / "run.sh").chmod(0o755)
    (d / "link").symlink_to("pkg/__init__.py")
    (d / "empty").mkdir()
    return d


def test_tree_shape():
    assert stage.children(0, 5) == [1, 2] and stage.children(1, 5) == [3, 4] and stage.children(2, 5) == []
    assert [stage.parent(i) for i in range(5)] == [None, 0, 0, 1, 1]
    assert [stage.depth(n) for n in (1, 2, 3, 4, 7, 8, 10000)] == [0, 1, 1, 2, 2, 3, 13]


@pytest.mark.parametrize("n", [1, 2, 5])
def test_every_node_gets_a_verified_identical_copy(tmp_path, src, n):
    hosts, hostfile, token = _tree(tmp_path, n)
    res = _run_nodes(hostfile, token, src, str(tmp_path / "local" / "{host}" / "env"), n)
    assert [r.returncode for r in res] == [0] * n, [r.stderr for r in res]
    assert f"on {n} node(s)" in res[0].stdout and "every copy verified" in res[0].stdout
    want = _tree_of(src)
    for h in hosts:
        assert _tree_of(tmp_path / "local" / h / "env") == want
    leftovers = [p.name for p in (tmp_path / "local").rglob("*partial*")]
    assert leftovers == []


def test_a_second_job_replaces_the_earlier_copy(tmp_path, src):
    hosts, hostfile, token = _tree(tmp_path, 2)
    dest = str(tmp_path / "local" / "{host}")
    assert all(r.returncode == 0 for r in _run_nodes(hostfile, token, src, dest, 2))
    (src / "pkg" / "__init__.py").write_text("X = 2\n")
    (src / "run.sh").unlink()
    assert all(r.returncode == 0 for r in _run_nodes(hostfile, token, src, dest, 2))
    for h in hosts:
        assert (tmp_path / "local" / h / "pkg" / "__init__.py").read_text() == "X = 2\n"
        assert not (tmp_path / "local" / h / "run.sh").exists()


def test_a_node_that_cannot_write_fails_the_job_and_is_named(tmp_path, src):
    """Node 3 (a leaf under node 1) has a file where its destination's parent should be: the
    whole tree fails, node 0 names 127.0.0.4, and no node keeps a copy or a partial one."""
    hosts, hostfile, token = _tree(tmp_path, 5)
    (tmp_path / "local").mkdir()
    (tmp_path / "local" / "127.0.0.4").write_text("not a directory")
    res = _run_nodes(hostfile, token, src, str(tmp_path / "local" / "{host}" / "env"), 5)
    assert res[0].returncode == 3
    line = res[0].stderr.strip().splitlines()[-1]
    assert line.startswith("[hpc-launch] stage: error on 127.0.0.4:"), res[0].stderr
    assert res[3].returncode == 3
    for h in hosts:
        assert not (tmp_path / "local" / h / "env").exists()
    assert [p.name for p in (tmp_path / "local").rglob("*partial*")] == []


IMAGE_ARGS = ["--entry", "--timeout", "20", "--idle", "20"]


def test_an_image_file_is_staged_whole_under_its_real_name_through_a_link(tmp_path):
    """A SIF/squashfs image is one file: every node gets it byte for byte as DEST/NAME (the file a
    link named, never the link), and --resolve says that path."""
    hosts, hostfile, token = _tree(tmp_path, 3)
    (tmp_path / "images").mkdir()
    sif = tmp_path / "images" / "pytorch-24.05.sif"
    sif.write_bytes(os.urandom(2 * stage.CHUNK + 777))
    (tmp_path / "current.sif").symlink_to(sif)
    dest = str(tmp_path / "local" / "{host}" / "image")
    extra = {i: IMAGE_ARGS for i in range(3)}
    res = _run_nodes(hostfile, token, tmp_path / "current.sif", dest, 3, extra=extra)
    assert [r.returncode for r in res] == [0, 0, 0], [r.stderr for r in res]
    for h in hosts:
        assert [p.name for p in (tmp_path / "local" / h / "image").iterdir()] == ["pytorch-24.05.sif"]
        assert (tmp_path / "local" / h / "image" / "pytorch-24.05.sif").read_bytes() == sif.read_bytes()
    said = subprocess.run(
        [sys.executable, "-m", "hpc_launch.stage", "--hostfile", str(hostfile), "--resolve", dest]
        + ["--entry", "--src", str(tmp_path / "current.sif")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert said == str(tmp_path / "local" / hosts[0] / "image" / "pytorch-24.05.sif")


def test_a_directory_image_is_staged_whole_with_its_links(tmp_path, src):
    """A charliecloud image is a directory tree (links such as bin -> usr/bin): DEST/NAME is that
    tree, identical on every node."""
    hosts, hostfile, token = _tree(tmp_path, 2)
    res = _run_nodes(
        hostfile, token, src, str(tmp_path / "l" / "{host}" / "image"), 2, extra={0: IMAGE_ARGS, 1: IMAGE_ARGS}
    )
    assert [r.returncode for r in res] == [0, 0], [r.stderr for r in res]
    for h in hosts:
        assert _tree_of(tmp_path / "l" / h / "image" / "src") == _tree_of(src)


def test_a_failed_image_staging_is_one_line_naming_the_node_and_the_fix(tmp_path, src):
    hosts, hostfile, token = _tree(tmp_path, 2)
    (tmp_path / "l").mkdir()
    (tmp_path / "l" / "127.0.0.2").write_text("not a directory")
    args = [*IMAGE_ARGS, "--fix", "stage.dest needs room for the image on every node"]
    res = _run_nodes(hostfile, token, src, str(tmp_path / "l" / "{host}" / "image"), 2, extra={0: args, 1: args})
    assert [r.returncode for r in res] == [3, 3]
    [line] = res[0].stderr.strip().splitlines()
    assert line.startswith("[hpc-launch] stage: error on 127.0.0.2: ") and line.endswith(
        "(stage.dest needs room for the image on every node)"
    ), line
    assert not (tmp_path / "l" / "127.0.0.1" / "image").exists()


def test_a_node_that_never_starts_is_named(tmp_path, src):
    hosts, hostfile, token = _tree(tmp_path, 3)
    fast = ["--timeout", "2", "--idle", "5"]  # 2 s for the tree to connect: the real nodes need a fraction
    res = _run_nodes(hostfile, token, src, str(tmp_path / "l" / "{host}"), 3, skip={2}, extra={0: fast, 1: fast})
    assert res[0].returncode == 3
    assert "127.0.0.3 did not connect for staging" in res[0].stderr, res[0].stderr
    assert not (tmp_path / "l" / "127.0.0.1").exists()


def test_a_node_without_the_token_is_not_fed(tmp_path, src):
    """A connection that cannot prove the job's token (another job's node, a stranger) is closed
    without data; the real node is still waited for."""
    hosts, hostfile, token = _tree(tmp_path, 2)
    other = tmp_path / "other-token"
    other.write_text(os.urandom(16).hex())
    fast = ["--timeout", "2", "--idle", "5"]  # 2 s for the tree to connect: the real nodes need a fraction
    port = _free_port()
    argv = [sys.executable, "-m", "hpc_launch.stage", "--hostfile", str(hostfile), "--src", str(src)]
    argv += ["--port", str(port)] + fast
    root = subprocess.Popen(
        argv + ["--dest", str(tmp_path / "a"), "--token-file", str(token), "--index", "0"],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )
    stranger = subprocess.run(
        argv + ["--dest", str(tmp_path / "b"), "--token-file", str(other), "--index", "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    _, err = root.communicate(timeout=30)
    assert root.returncode == 3 and "127.0.0.2 did not connect for staging" in err
    assert stranger.returncode == 3 and not (tmp_path / "b").exists()


def test_a_killed_node_fails_its_parent_fast(tmp_path):
    """A leaf killed mid-stream: its parent's send fails at once and names it (no wait for a timeout)."""
    big = tmp_path / "big"
    big.mkdir()
    for i in range(40):
        (big / f"f{i}").write_bytes(os.urandom(4 << 20))
    hosts, hostfile, token = _tree(tmp_path, 2)
    port = _free_port()
    argv = [sys.executable, "-m", "hpc_launch.stage", "--hostfile", str(hostfile), "--src", str(big)]
    argv += ["--port", str(port), "--token-file", str(token), "--timeout", "20", "--idle", "60"]
    root = subprocess.Popen(argv + ["--dest", str(tmp_path / "a"), "--index", "0"], cwd=ROOT, stderr=subprocess.PIPE)
    leaf = subprocess.Popen(argv + ["--dest", str(tmp_path / "b"), "--index", "1"], cwd=ROOT)
    partial = tmp_path.glob("b.partial-*")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not any(partial):
        time.sleep(0.05)
        partial = tmp_path.glob("b.partial-*")
    leaf.kill()
    leaf.wait()
    t0 = time.monotonic()
    _, err = root.communicate(timeout=60)
    assert root.returncode == 3, err
    assert time.monotonic() - t0 < 15
    assert b"on 127.0.0.1: 127.0.0.2 dropped the staging stream" in err or b"127.0.0.2 failed" in err, err
    assert not (tmp_path / "a").exists()


PROBE = "import sys, stagedprobe; print(sys.prefix); print(stagedprobe.__file__)"


def test_a_staged_venv_runs_from_its_copy(tmp_path):
    """A real virtualenv, staged: its python's prefix, its packages, its activate script and its
    console scripts' shebangs are the node-local copy, not the shared path."""
    venv = tmp_path / "shared" / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "stagedprobe.py").write_text("")
    tool = venv / "bin" / "probe-tool"
    tool.write_text(f"#!{venv}/bin/python\nimport stagedprobe, sys\nprint(stagedprobe.__file__)\n")
    tool.chmod(0o755)
    hosts, hostfile, token = _tree(tmp_path, 2)
    port = _free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "hpc_launch.stage", "--hostfile", str(hostfile), "--src", str(venv), "--venv"]
            + ["--dest", str(tmp_path / "local" / "{host}" / "venv"), "--port", str(port)]
            + ["--token-file", str(token), "--index", str(i)],
            cwd=ROOT,
        )
        for i in range(2)
    ]
    assert [p.wait(timeout=60) for p in procs] == [0, 0]
    for h in hosts:
        copy = tmp_path / "local" / h / "venv"
        out = subprocess.run(
            [str(copy / "bin" / "python"), "-c", PROBE],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        assert out == [str(copy), str(next((copy / "lib").glob("python3*/site-packages")) / "stagedprobe.py")]
        via_tool = subprocess.run([str(copy / "bin" / "probe-tool")], capture_output=True, text=True, check=True)
        assert via_tool.stdout.startswith(str(copy) + "/")
        activated = subprocess.run(
            ["bash", "-c", f"source {copy}/bin/activate && echo $VIRTUAL_ENV && command -v python"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        assert activated == [str(copy), str(copy / "bin" / "python")]
    assert str(venv) in (venv / "bin" / "activate").read_text()  # the shared original is untouched


def test_my_index_by_name_address_or_launcher(monkeypatch):
    assert stage.my_index(["nowhere.invalid", socket.gethostname()]) == 1
    assert stage.my_index(["198.51.100.1", "127.0.0.1"]) == 1  # an address this node owns
    monkeypatch.setenv("SLURM_NODEID", "2")
    assert stage.my_index(["a", "b", "c"], "SLURM_NODEID") == 2
    with pytest.raises(stage.StageError, match="set none of PALS_RANKID, PMIX_RANK, PMI_RANK"):
        stage.my_index(["a", "b", "c"], "PMI_RANK")
    with pytest.raises(stage.StageError, match="is not in the hostfile"):
        stage.my_index(["198.51.100.1", "198.51.100.2"])


@pytest.mark.parametrize("name", ["PMIX_RANK", "PALS_RANKID", "PMI_RANK"])
def test_mpiexec_staging_finds_the_place_under_each_pmis_name(monkeypatch, name):
    # Aurora's mpiexec (PMIx) sets PMIX_RANK and PALS_RANKID, not PMI_RANK (ALCF's Aurora pages)
    for other in ("PMIX_RANK", "PALS_RANKID", "PMI_RANK"):
        monkeypatch.delenv(other, raising=False)
    monkeypatch.setenv(name, "1")
    assert stage.my_index(["a", "b", "c"], "PMI_RANK") == 1


def test_bad_input_is_one_line(tmp_path, src):
    hosts, hostfile, token = _tree(tmp_path, 1)
    empty = tmp_path / "empty-token"
    empty.write_text("")
    base = [sys.executable, "-m", "hpc_launch.stage", "--hostfile", str(hostfile), "--port", str(_free_port())]
    for args, words in (
        (
            ["--src", str(tmp_path / "nope"), "--dest", str(tmp_path / "d"), "--token-file", str(token)],
            "is not a directory",
        ),
        (["--src", str(src), "--dest", str(tmp_path / "d"), "--token-file", str(empty)], "holds no token"),
        (["--src", str(src), "--dest", str(tmp_path / "d"), "--token-file", "/dev/zero"], "not a regular file"),
        (
            ["--src", str(src), "--dest", str(tmp_path / "d"), "--token-file", str(token), "--index", "4"],
            "not in the hostfile",
        ),
    ):
        r = subprocess.run(base + args, cwd=ROOT, capture_output=True, text=True, timeout=30)
        assert r.returncode == 3 and len(r.stderr.strip().splitlines()) == 1 and words in r.stderr, r.stderr
        assert not (tmp_path / "d").exists()


def test_nodes_whose_names_do_not_resolve_find_their_parent_by_its_announced_address(tmp_path, src):
    """The testbed's PBS (and any site whose node file holds names the nodes cannot resolve): each
    node announces its --net-if address in the shared work dir and a child waits for its parent's."""
    _, hostfile, token = _tree(tmp_path, 0)
    hosts = ["node-a.invalid", "node-b.invalid", "node-c.invalid"]
    hostfile.write_text("".join(f"{h} slots=1\n" for h in hosts))
    dest = str(tmp_path / "local" / "{host}" / "env")
    plain = _run_nodes(hostfile, token, src, dest, 3, extra={i: ["--timeout", "1"] for i in range(3)})
    assert plain[1].returncode == 3 and "node-a.invalid" in plain[1].stderr  # before: no way to reach node 0
    board = tmp_path / "addrs"
    board.mkdir()
    told = ["--timeout", "20", "--idle", "20", "--net-if", "lo", "--announce", str(board)]
    res = _run_nodes(hostfile, token, src, dest, 3, extra={i: told for i in range(3)})
    assert [r.returncode for r in res] == [0, 0, 0], [r.stderr for r in res]
    assert (board / "0").read_text() == "127.0.0.1\n"  # node 0 has children: it announced
    for h in hosts:
        assert _tree_of(tmp_path / "local" / h / "env") == _tree_of(src)


def test_an_interface_without_an_address_is_one_line(tmp_path, src):
    hosts, hostfile, token = _tree(tmp_path, 2)
    told = ["--timeout", "5", "--net-if", "nosuch0", "--announce", str(tmp_path)]
    res = _run_nodes(hostfile, token, src, str(tmp_path / "l" / "{host}"), 2, extra={0: told, 1: told})
    assert res[0].returncode == 3
    assert "network interface nosuch0 (profile key net_if) has no IPv4 address" in res[0].stderr
    assert len(res[0].stderr.strip().splitlines()) == 1


# ---- issue 28: a destination another user prepared, strangers on the port, frames' sizes ---------


def _one_node(tmp_path: Path, src: Path, dest: str) -> subprocess.CompletedProcess:
    _, hostfile, token = _tree(tmp_path, 1)
    return _run_nodes(hostfile, token, src, dest, 1)[0]


def test_a_destination_under_a_directory_others_can_write_is_refused(tmp_path, src):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # a /tmp-style directory without the sticky bit: anyone may rename what is in it
    (shared / "stage").mkdir()
    (shared / "stage" / "canary.py").write_text("open('RAN', 'w')\n")  # another user's "copy"
    r = _one_node(tmp_path, src, str(shared / "stage"))
    assert r.returncode == 3 and f"{shared} is writable by other users" in r.stderr, r.stderr
    assert (shared / "stage" / "canary.py").exists() and not (shared / "stage" / "pkg").exists()
    shared.chmod(0o1777)  # sticky, like /tmp: then only what the job made itself is trusted
    r = _one_node(tmp_path, src, str(shared / "mine" / "env"))
    assert r.returncode == 0, r.stderr
    assert (shared / "mine").stat().st_mode & 0o777 == 0o700  # made by the job, for it alone


@pytest.mark.skipif(os.geteuid() != 0, reason="another user's directory needs root to make")
def test_a_destination_another_user_owns_is_refused(tmp_path, src):
    import pwd

    nobody = pwd.getpwnam("nobody").pw_uid
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    theirs = shared / "stage"
    theirs.mkdir()
    os.chown(theirs, nobody, -1)  # pre-created by another user, before the job
    r = _one_node(tmp_path, src, str(theirs / "env"))
    assert r.returncode == 3 and f"{theirs} belongs to uid {nobody}" in r.stderr, r.stderr
    r = _one_node(tmp_path, src, str(theirs))  # the destination itself
    assert r.returncode == 3 and f"{theirs} belongs to uid {nobody}" in r.stderr, r.stderr
    link = shared / "link"
    link.symlink_to(tmp_path / "elsewhere")
    os.lchown(link, nobody, -1)
    r = _one_node(tmp_path, src, str(link / "env"))
    assert r.returncode == 3 and f"{link} belongs to uid {nobody}" in r.stderr, r.stderr


def test_strangers_on_the_port_do_not_keep_the_real_children_out(tmp_path, src):
    """A process without the token opens a silent connection to node 0, another sends its hello a
    byte every 2 s, before the real children connect: they are dropped after a short deadline and
    the real children are fed."""
    hosts, hostfile, token = _tree(tmp_path, 3)
    port = _free_port()
    argv = [sys.executable, "-m", "hpc_launch.stage", "--hostfile", str(hostfile), "--src", str(src)]
    argv += ["--port", str(port), "--token-file", str(token), "--timeout", "20", "--idle", "20"]
    root = subprocess.Popen(argv + ["--dest", str(tmp_path / "l0"), "--index", "0"], cwd=ROOT, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 20
    while True:
        try:
            silent = socket.create_connection(("127.0.0.1", port), timeout=1)
            break
        except OSError:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    slow = socket.create_connection(("127.0.0.1", port), timeout=1)
    stop = time.monotonic() + 25

    def drip():
        for byte in stage.MAGIC:
            if time.monotonic() > stop:
                return
            try:
                slow.send(bytes([byte]))
            except OSError:
                return
            time.sleep(2)

    import threading

    threading.Thread(target=drip, daemon=True).start()
    time.sleep(0.5)
    kids = [
        subprocess.Popen(
            argv + ["--dest", str(tmp_path / f"l{i}"), "--index", str(i)], cwd=ROOT, stderr=subprocess.PIPE
        )
        for i in (1, 2)
    ]
    t0 = time.monotonic()
    _, err = root.communicate(timeout=60)
    for kid in kids:
        kid.communicate(timeout=60)
    silent.close()
    slow.close()
    assert root.returncode == 0 and all(k.returncode == 0 for k in kids), err
    assert time.monotonic() - t0 < 15  # not held until the 20 s connect deadline
    for i in range(3):
        assert _tree_of(tmp_path / f"l{i}") == _tree_of(src)


def _node_1_under_a_fake_parent(tmp_path, src, timeout: int):
    """Node 1 of a 2-node tree, started for real, whose parent is this test's socket: returns the
    node, the listening socket and the accepted connection, the node's hello already read."""
    _, hostfile, token = _tree(tmp_path, 2)
    port = _free_port()
    fake_parent = socket.create_server(("127.0.0.1", port))
    argv = [sys.executable, "-m", "hpc_launch.stage", "--hostfile", str(hostfile), "--src", str(src)]
    argv += ["--port", str(port), "--token-file", str(token), "--timeout", str(timeout), "--idle", str(timeout)]
    child = subprocess.Popen(argv + ["--dest", str(tmp_path / "l1"), "--index", "1"], cwd=ROOT, stderr=subprocess.PIPE)
    conn, _ = fake_parent.accept()
    conn.recv(64)  # its hello
    return child, fake_parent, conn


def test_a_frame_announced_bigger_than_a_chunk_is_refused_before_it_is_read(tmp_path, src):
    child, fake_parent, conn = _node_1_under_a_fake_parent(tmp_path, src, timeout=10)
    conn.sendall(stage.LEN.pack(0xFFFFFFF0) + b"x" * (1 << 20))  # "4 GB follow", and some
    t0 = time.monotonic()
    _, err = child.communicate(timeout=30)
    conn.close()
    fake_parent.close()
    assert child.returncode == 3 and b"announced a frame of 4294967280 bytes" in err, err
    assert time.monotonic() - t0 < 5
    assert not list(tmp_path.glob("l1*"))


def test_a_node_stopped_by_its_launcher_mid_copy_leaves_no_partial_copy(tmp_path, src):
    """srun --kill-on-bad-exit (and mpirun, mpiexec) end every other node with SIGTERM once one
    fails: a node that was mid-copy removes its DEST.partial-PID before it exits (it used to die on
    the spot and leave it) and says it was stopped, not that it failed."""
    child, fake_parent, conn = _node_1_under_a_fake_parent(tmp_path, src, timeout=20)
    conn.sendall(stage.LEN.pack(5) + b"12345")  # a first chunk: the copy is under way
    deadline = time.monotonic() + 20
    while not list(tmp_path.glob("l1.partial-*")):
        assert time.monotonic() < deadline and child.poll() is None
        time.sleep(0.02)
    child.send_signal(signal.SIGTERM)
    _, err = child.communicate(timeout=20)
    conn.close()
    fake_parent.close()
    assert child.returncode == 128 + signal.SIGTERM, err
    assert b"127.0.0.2 stopped by SIGTERM" in err and b"stage: error" not in err, err
    assert not list(tmp_path.glob("l1*"))
