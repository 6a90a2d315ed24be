"""The named language-model sizes of `python -m hpc_launch.train --model NAME` (pure data, standard library only).

GPT sizes are GPT-2's (Radford et al. 2019: small 124M, medium 355M, large 774M, xl 1.5B) and
GPT-3's 1.3B shape (Brown et al. 2020, table 2.1: 24 layers, d_model 2048); T5 sizes are the
original T5's released configs (Raffel et al. 2020: t5-small, t5-base, t5-large; ReLU feed-forward).
The `-tiny` sizes exist for CPU tests. bench/bench_gpu.py and the planner read this table too.
"""

from __future__ import annotations

from typing import Dict

GPT_VOCAB = 50257  # GPT-2's BPE vocabulary
T5_VOCAB = 32128  # T5's SentencePiece vocabulary (32,000 + 100 sentinels, padded)

# name -> GPT2Config keyword arguments (n_positions: the longest --seq-len the model accepts)
GPT_SIZES: Dict[str, dict] = {
    "gpt-tiny": dict(n_layer=2, n_embd=64, n_head=4, n_positions=512, vocab_size=512),
    "gpt-125m": dict(n_layer=12, n_embd=768, n_head=12, n_positions=1024, vocab_size=GPT_VOCAB),
    "gpt-350m": dict(n_layer=24, n_embd=1024, n_head=16, n_positions=1024, vocab_size=GPT_VOCAB),
    "gpt-774m": dict(n_layer=36, n_embd=1280, n_head=20, n_positions=1024, vocab_size=GPT_VOCAB),
    "gpt-1.3b": dict(n_layer=24, n_embd=2048, n_head=16, n_positions=2048, vocab_size=GPT_VOCAB),
}

# name -> T5Config keyword arguments (relative position buckets: any --seq-len)
T5_SIZES: Dict[str, dict] = {
    "t5-tiny": dict(d_model=64, d_ff=128, d_kv=16, num_layers=2, num_heads=4, vocab_size=512),
    "t5-small": dict(d_model=512, d_ff=2048, d_kv=64, num_layers=6, num_heads=8, vocab_size=T5_VOCAB),
    "t5-base": dict(d_model=768, d_ff=3072, d_kv=64, num_layers=12, num_heads=12, vocab_size=T5_VOCAB),
    "t5-large": dict(d_model=1024, d_ff=4096, d_kv=64, num_layers=24, num_heads=16, vocab_size=T5_VOCAB),
}

LM_SIZES = (*GPT_SIZES, *T5_SIZES)
DEFAULT_SEQ_LEN = 128  # --seq-len when not given (short enough for CPU tests; GPU runs say 1024)


def is_lm_size(name: str) -> bool:
    return name in GPT_SIZES or name in T5_SIZES
