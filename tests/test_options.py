"""The option table (hpc_launch/options.py, issue 30): every JobSpec field has its row, every
command's list names rows, a per-command help names a command that takes the row, and the project
file's keys and the empty-text checks are the rows that say so."""

from __future__ import annotations

import pytest

from hpc_launch import options
from hpc_launch.spec import JobSpec, _TEXT_OPTIONS


def test_every_jobspec_field_has_its_row_and_every_row_field_is_jobspecs():
    fields = {row.field for row in options.job_rows()}
    assert fields == set(JobSpec.keys())


def test_commands_name_rows_once_and_helps_name_commands_that_take_the_row():
    for command, keys in options.COMMANDS.items():
        assert len(set(keys)) == len(keys), command
        names = [options.ROWS[key].name for key in keys]
        assert len(set(names)) == len(names), f"{command}: two rows give the same parameter"
    for row in options.ROWS.values():
        takers = options.commands_taking(row.key)
        assert set(row.helps) <= set(takers), f"{row.key}: a help for a command that does not take it"
        assert takers or not row.flags, f"{row.key}: no command takes it"


def test_alloc_takes_submits_rows_but_the_batch_only_ones():
    submit, alloc = options.COMMANDS["submit"], options.COMMANDS["alloc"]
    assert [k for k in alloc if k != "no_shell"] == [k for k in submit if k not in options.BATCH_ONLY.split()]


def test_the_project_file_keys_are_the_rows_with_a_yaml_kind():
    from hpc_launch.project_config import _schema

    keys = [row.field for row in options.job_rows() if row.yaml]
    assert sorted(_schema().__struct_fields__) == sorted(keys)
    assert "exclude" not in keys and "conda" in keys  # conda: a project-file key with no option


def test_the_empty_text_checks_are_the_text_rows():
    assert _TEXT_OPTIONS["cluster"] == "--cluster" and _TEXT_OPTIONS["conda"] == "--conda"
    assert "nodes" not in _TEXT_OPTIONS


@pytest.mark.parametrize("kind", ["str", "int", "float", "gpus", "flag", "argument"])
def test_every_kind_a_row_has_is_one_the_commands_build(kind):
    from hpc_launch.cli.declare import _TYPES

    assert kind in _TYPES
    assert {row.kind for row in options.ROWS.values()} <= set(_TYPES)


def test_a_project_files_container_is_the_image_the_job_runs_in(tmp_path):
    # docs/commands.md: --container defaults to the project file's `container:`
    from hpc_launch.project_config import spec_for

    (tmp_path / "hpc-launch.yaml").write_text("cluster: local\ncontainer: /images/ngc.sif\n")
    assert spec_for(str(tmp_path / "hpc-launch.yaml"), {}).container == "/images/ngc.sif"
    assert spec_for(str(tmp_path / "hpc-launch.yaml"), {"container": "/other.sif"}).container == "/other.sif"
