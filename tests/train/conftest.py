"""Skip the `train` tests when the training stack is not installed."""

import pytest


@pytest.fixture(scope="session", autouse=True)
def _needs_training_stack():
    pytest.importorskip("deepspeed")
    pytest.importorskip("sklearn")
