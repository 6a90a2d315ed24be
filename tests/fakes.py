"""The one stand-in for the Transport protocol (hpc_launch/transport/base.py) in fast tests.

Commands are answered by `answer(argv)` (default: rc 0, no output), files live in memory, and
every call is recorded in order. Real transports are tested against a real sshd and this machine
(tests/test_transport.py, tests/e2e/); this one replays what a scheduler printed.
"""

from __future__ import annotations

from typing import Callable, Dict, List, Optional

from hpc_launch.transport import CommandResult

OK = CommandResult(0, "", "")


class FakeTransport:
    def __init__(
        self,
        answer: Optional[Callable[[List[str]], CommandResult]] = None,
        *,
        host: str = "localhost",
        every_file_exists: bool = False,
    ):
        self.host = host
        self.answer = answer or (lambda argv: OK)
        self.files: Dict[str, bytes] = {}
        self.calls: List[
            tuple
        ] = []  # ("run", argv, env, stdin) | ("put_text", path) | ("put_private", path) | ("remove", path)
        self.every_file_exists = every_file_exists  # size() of a path never written is 0, not None

    @property
    def ran(self) -> List[List[str]]:
        """The commands run, in order."""
        return [c[1] for c in self.calls if c[0] == "run"]

    def run(self, argv, *, cwd=None, env=None, timeout=60.0, stdin=None) -> CommandResult:
        self.calls.append(("run", list(argv), dict(env or {}), stdin))
        return self.answer(list(argv))

    def put_text(self, path: str, text: str, mode: int = 0o644) -> None:
        self.calls.append(("put_text", path))
        self.files[path] = text.encode()

    def put_private(self, path: str, data: bytes) -> None:
        self.calls.append(("put_private", path))
        self.files[path] = data

    def read_from(self, path: str, offset: int, limit: int = 1 << 20) -> bytes:
        if path not in self.files:
            raise FileNotFoundError(path)
        return self.files[path][offset : offset + limit]

    def size(self, path: str) -> Optional[int]:
        if path in self.files:
            return len(self.files[path])
        return 0 if self.every_file_exists else None

    def remove(self, path: str) -> None:
        self.calls.append(("remove", path))
        self.files.pop(path, None)

    def resolve_path(self, path: str) -> str:
        return path

    def close(self) -> None:
        pass
