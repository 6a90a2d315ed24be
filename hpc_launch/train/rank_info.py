"""Who this rank is, as its launcher said (its home: hpc_launch/joblayer/ranks.py, shared with the
job layer every `--script` rank starts through)."""

from hpc_launch.joblayer.ranks import RankInfo

__all__ = ["RankInfo"]
