"""The face's leftovers of issue 33: every command in the docs' list, no `<str>` beside a
positional argument, no command's summary broken mid-sentence, no documented option that does not
exist, and `where` taking submit's --pass-env / --notify with submit's own checks."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hpc_launch import cli

DOCS = Path(__file__).resolve().parents[1] / "docs" / "commands.md"


def _commands() -> dict:
    from typer.main import get_command

    from hpc_launch.cli.app import app

    import hpc_launch.cli.info_cmds  # noqa: F401  (the commands register on import)
    import hpc_launch.cli.job_cmds  # noqa: F401
    import hpc_launch.cli.submit_cmds  # noqa: F401

    return dict(get_command(app).commands)


def test_the_docs_list_every_command():
    listed = set(re.findall(r"^hpc-launch (\w+)", DOCS.read_text().split("```")[1], re.M))
    assert set(_commands()) <= listed, sorted(set(_commands()) - listed)


def test_no_command_summary_breaks_mid_sentence():
    for name, command in _commands().items():
        first = (command.help or "").split("\n\n")[0]
        assert "\n" not in first.strip(), f"{name}: {first!r}"


@pytest.mark.parametrize("command", ["show", "report", "cancel", "logs", "announce", "hosts", "rerun"])
def test_a_positional_argument_shows_its_name_not_its_type(command, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    out = capsys.readouterr().out
    assert "Arguments" in out and "<str>" not in out, out


def test_the_hostfile_usage_in_the_docs_names_only_options_that_exist():
    section = DOCS.read_text().split("## hostfile", 1)[1].split("\n## ", 1)[0]
    usage = section.split("```", 2)[1]
    named = set(re.findall(r"(?<![\w-])(-\w|--[\w-]+)", usage))
    have = {opt for p in _commands()["hostfile"].params for opt in p.opts + p.secondary_opts}
    assert named <= have, sorted(named - have)
    bullets = set(re.findall(r"`(-\w|--[\w-]+)[ `]", section.split("```", 2)[2].split("```")[0]))
    assert bullets <= have, sorted(bullets - have)


@pytest.mark.parametrize("option", ["--pass-env", "--notify"])
def test_where_takes_pass_env_and_notify_with_submits_checks(option, capsys, monkeypatch):
    monkeypatch.delenv("NOT_SET_HERE", raising=False)
    with pytest.raises(SystemExit) as exit_:
        cli.main(["where", "-c", "local", option, "NOT_SET_HERE"])
    said = "".join(capsys.readouterr())  # where names each cluster's refusal on its own line
    assert exit_.value.code == 2 and f"{option} NOT_SET_HERE: it is not set in this shell" in said, said
    monkeypatch.setenv("NOT_SET_HERE", "https://hooks.example/x")
    with pytest.raises(SystemExit) as exit_:
        cli.main(["where", "-c", "local", option, "NOT_SET_HERE"])
    out, err = capsys.readouterr()
    assert exit_.value.code == 0 and "local" in out, err
