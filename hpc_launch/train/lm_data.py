"""Token data for the language models: synthetic tokens, or a local text/JSONL file packed into blocks.

Every sample is `{"input_ids": [seq_len], "labels": [seq_len]}` (long tensors): a causal LM
predicts its own next tokens (the model shifts the labels); an encoder-decoder gets a denoising
target (`Denoise`: spans of the input masked, the original tokens as labels). Nothing is
downloaded: a tokenizer is read from a local directory, or the text is its UTF-8 bytes.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, List, Optional

from .errors import TrainError

SYNTHETIC = "synthetic-tokens"
BYTE_VOCAB = 258  # 256 byte values, then the end-of-document token and the mask token
BYTE_EOS, BYTE_MASK = 256, 257
SYNTHETIC_NOISE = 0.1  # the share of tokens drawn at random: the rest follow a fixed successor table
VAL_FRACTION = 0.05  # of a text file's packed blocks, the last ones, held out for perplexity
MASK_FRACTION, MASK_SPAN = 0.15, 3  # T5's span corruption: 15% of the tokens, mean span 3


@dataclass
class Tokens:
    train: Any  # map-style datasets of {"input_ids", "labels"}
    val: Any
    vocab_size: int  # ids the data uses are below this
    mask_id: int  # the id Denoise writes over masked spans
    seq_len: int
    source: str  # what the tokens are: synthetic | bytes | the tokenizer's directory


class SyntheticTokens:
    """Learnable random text: each token is followed by its fixed successor (the next in one
    random cyclic order of the vocabulary, shared by train and val) except a SYNTHETIC_NOISE share
    drawn at random, so a model's loss falls from ln(vocab) towards the noise's entropy. Sample i
    is a pure function of (seed, i): every rank and run agrees. Vectorised (a token k places after
    the last random one is k steps further along the cycle): 1024 tokens in ~0.1 ms, so the data
    never holds up a GPU step."""

    def __init__(self, length: int, vocab_size: int, seq_len: int, seed: int):
        import numpy as np

        self.length, self.vocab, self.seq_len, self.seed = length, vocab_size, seq_len, seed
        self.order = np.random.default_rng(1234).permutation(vocab_size)  # the cycle
        self.place = np.argsort(self.order)  # where each token stands in it
        self.successor = self.order[(self.place + 1) % vocab_size]

    def __len__(self):
        return self.length

    def __getitem__(self, index):
        import numpy as np
        import torch

        rng = np.random.default_rng(self.seed * 1_000_003 + index)
        drawn = rng.integers(0, self.vocab, self.seq_len)
        fresh = rng.random(self.seq_len) < SYNTHETIC_NOISE
        fresh[0] = True
        t = np.arange(self.seq_len)
        last = np.maximum.accumulate(np.where(fresh, t, 0))  # the latest random token at or before t
        ids = self.order[(self.place[drawn[last]] + t - last) % self.vocab]
        x = torch.from_numpy(ids.astype(np.int64))
        return {"input_ids": x, "labels": x}


class Blocks:
    """Rows of a packed token stream, one sample each."""

    def __init__(self, rows):
        self.rows = rows  # LongTensor [n, seq_len]

    def __len__(self):
        return self.rows.shape[0]

    def __getitem__(self, index):
        x = self.rows[index]
        return {"input_ids": x, "labels": x}


class Denoise:
    """An encoder-decoder's sample from a token sample: about MASK_FRACTION of the input in spans
    of MASK_SPAN replaced by the mask id, the original tokens as the target (a denoising form of
    T5's span corruption that needs no sentinel ids in the vocabulary). Spans are a pure function
    of (seed, index)."""

    def __init__(self, base, mask_id: int, seed: int):
        self.base, self.mask_id, self.seed = base, mask_id, seed

    def __len__(self):
        return len(self.base)

    def __getitem__(self, index):
        import numpy as np

        sample = self.base[index]
        labels = sample["labels"]
        n = labels.shape[0]
        rng = np.random.default_rng(self.seed * 7_000_003 + index)
        spans = max(1, round(n * MASK_FRACTION / MASK_SPAN))
        inputs = labels.clone()
        for start in rng.integers(0, max(1, n - MASK_SPAN + 1), spans).tolist():
            inputs[start : start + MASK_SPAN] = self.mask_id
        return {"input_ids": inputs, "labels": labels}


def _documents(path: str) -> List[str]:
    """A .jsonl file's "text" fields (one document per line); any other file is one document."""
    try:
        with open(path, encoding="utf-8") as f:
            if not path.endswith(".jsonl"):
                return [f.read()]
            docs = []
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                record = json.loads(line)
                if not isinstance(record, dict) or not isinstance(record.get("text"), str):
                    raise TrainError(
                        f'{path} line {n} has no string "text" field', hint='write one {"text": "..."} per line'
                    )
                docs.append(record["text"])
            return docs
    except (OSError, UnicodeDecodeError) as err:
        raise TrainError(f"cannot read text data {path}: {err}") from None
    except json.JSONDecodeError as err:
        raise TrainError(f"{path} is not JSON Lines: {err}", hint='write one {"text": "..."} per line') from None


def load_tokenizer(directory: str):
    """A tokenizer saved in `directory` (tokenizer.json / tokenizer_config.json), never downloaded."""
    from .lm import import_transformers

    transformers = import_transformers()
    try:
        return transformers.AutoTokenizer.from_pretrained(directory, local_files_only=True)
    except (OSError, ValueError) as err:
        raise TrainError(
            f"cannot load a tokenizer from {directory}: {str(err).splitlines()[0]}",
            hint="pass a directory a tokenizer was saved to (tokenizer.json), or no --tokenizer to train on bytes",
        ) from None


def _stream(docs: List[str], tokenizer) -> List[int]:
    ids: List[int] = []
    if tokenizer is None:
        for doc in docs:
            ids.extend(doc.encode("utf-8"))
            ids.append(BYTE_EOS)
        return ids
    eos = tokenizer.eos_token_id
    for doc in docs:
        ids.extend(tokenizer(doc, add_special_tokens=False)["input_ids"])
        if eos is not None:
            ids.append(eos)
    return ids


def text_tokens(path: str, seq_len: int, tokenizer_dir: Optional[str]) -> Tokens:
    """The file's documents tokenized, joined (each ended by end-of-document) and cut into blocks
    of seq_len (packing: no padding; the stream's last partial block is dropped); the last
    VAL_FRACTION of the blocks (at least one) is held out."""
    import torch

    if not os.path.isfile(path):
        raise TrainError(f"text data not found: {path}", hint="pass --data synthetic-tokens, or a .txt / .jsonl file")
    tokenizer = load_tokenizer(tokenizer_dir) if tokenizer_dir else None
    ids = _stream(_documents(path), tokenizer)
    blocks = len(ids) // seq_len
    if blocks < 2:
        raise TrainError(
            f"{path} holds {len(ids)} tokens: under two blocks of --seq-len {seq_len} (one to train, one held out)",
            hint="lower --seq-len or give more text",
        )
    rows = torch.tensor(ids[: blocks * seq_len], dtype=torch.long).view(blocks, seq_len)
    held = max(1, round(blocks * VAL_FRACTION))
    if tokenizer is None:
        vocab, mask, source = BYTE_VOCAB, BYTE_MASK, "bytes"
    else:
        vocab = len(tokenizer)
        mask = next(
            i for i in (tokenizer.mask_token_id, tokenizer.unk_token_id, tokenizer.eos_token_id, 0) if i is not None
        )
        source = tokenizer_dir or "tokenizer"
    return Tokens(Blocks(rows[:-held]), Blocks(rows[-held:]), vocab, mask, seq_len, source)


def synthetic_tokens(samples: int, vocab_size: int, seq_len: int, seed: int) -> Tokens:
    """Tokens below vocab_size - 1; the last id is the mask."""
    content = vocab_size - 1
    return Tokens(
        SyntheticTokens(samples, content, seq_len, seed + 1),
        SyntheticTokens(max(64, samples // 16), content, seq_len, seed + 2),
        vocab_size,
        content,
        seq_len,
        "synthetic",
    )
