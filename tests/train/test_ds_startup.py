"""train/ds_startup: DeepSpeed's Muon modules are stood in for only when the run's optimizer is another."""

import sys

import pytest

from hpc_launch.train import ds_startup


@pytest.fixture
def clean_modules(monkeypatch):
    for name in ds_startup.MUON_MODULES:
        monkeypatch.delitem(sys.modules, name, raising=False)
    yield
    for name in ds_startup.MUON_MODULES:  # never leave a stand-in to another test of this process
        sys.modules.pop(name, None)


def test_another_optimizer_gets_a_muon_class_nothing_is_and_an_update_that_refuses(clean_modules):
    assert ds_startup.skip_muon_import({"optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}})
    from deepspeed.runtime.zero.muon.muon_optimizer import MuonWithAuxAdam  # what DeepSpeed imports
    from deepspeed.runtime.zero.muon.original_muon import muon_update

    assert not isinstance(object(), MuonWithAuxAdam)
    with pytest.raises(RuntimeError, match="Muon was called"):
        muon_update(None, None, 0.9)


@pytest.mark.parametrize("config", [{"optimizer": {"type": "Muon"}}, {"optimizer": {"type": "muon", "params": {}}}])
def test_a_muon_run_keeps_deepspeeds_own_modules(clean_modules, config):
    assert not ds_startup.skip_muon_import(config)
    assert not any(name in sys.modules for name in ds_startup.MUON_MODULES)


def test_modules_already_imported_are_left_alone(clean_modules):
    real = object()
    sys.modules[ds_startup.MUON_MODULES[0]] = real  # type: ignore[assignment]
    assert not ds_startup.skip_muon_import({})
    assert sys.modules[ds_startup.MUON_MODULES[0]] is real
