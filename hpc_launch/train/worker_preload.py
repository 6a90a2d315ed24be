"""Imported once by the DataLoader workers' forkserver (data.TrainBatches), before it forks them:
each worker then starts with torch, and torchvision where it is installed, already imported, as a
worker forked from the rank would, instead of importing them itself (~1 CPU-s each)."""

import importlib.util

import torch  # noqa: F401 - imported for the workers forked from here

from .tv_compat import import_torchvision

if importlib.util.find_spec("torchvision") is not None:
    import_torchvision()
