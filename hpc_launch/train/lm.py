"""Language models for the entrypoint: a GPT (causal LM) or a T5 (encoder-decoder) from a named
size (hpc_launch/train/lm_sizes.py, random initialisation), or a model directory the user has on disk.

`prepare(args)` checks everything cheap before any process group starts and returns the run's
`LanguageModel`: its data, how to build the model, how a batch becomes a loss, its FLOPs per
token and its held-out perplexity. Nothing is downloaded (`local_files_only` everywhere).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, Callable, Optional

from .errors import TrainError
from .lm_data import SYNTHETIC, Denoise, Tokens, synthetic_tokens, text_tokens
from .lm_sizes import DEFAULT_SEQ_LEN, GPT_SIZES, LM_SIZES, T5_SIZES

CAUSAL, SEQ2SEQ = "causal", "seq2seq"


def import_transformers():
    """`import transformers`, with torchvision importable first: transformers imports it when it
    is installed, and its CUDA-linked extension fails on CPU machines (hpc_launch/train/tv_compat.py)."""
    try:
        from .tv_compat import import_torchvision

        import_torchvision()
    except ImportError:
        pass
    try:
        import transformers
    except ImportError:
        raise TrainError(
            "language models need the transformers package", hint='pip install "hpc-launch[lm]" (or transformers)'
        ) from None
    return transformers


def is_model_dir(spec: str) -> bool:
    return os.path.isfile(os.path.join(spec, "config.json"))


def is_lm(model: str, data: str) -> bool:
    """Whether this run trains a language model (by its model, or by token data)."""
    return model in LM_SIZES or is_model_dir(model) or data == SYNTHETIC or data.endswith((".txt", ".jsonl"))


def _has_tokenizer(directory: str) -> bool:
    return any(os.path.isfile(os.path.join(directory, f)) for f in ("tokenizer.json", "tokenizer_config.json"))


@dataclass
class LanguageModel:
    name: str  # the --model value
    kind: str  # causal | seq2seq
    config: Any  # the transformers config the model is built from
    tokens: Tokens
    from_disk: bool  # weights read from the model directory

    @property
    def seq_len(self) -> int:
        return self.tokens.seq_len

    @property
    def data(self):
        """The datasets in the entrypoint's Data shape (num_classes: the vocabulary, image_size: the sequence)."""
        from .data import Data

        wrap: Callable = (lambda d, s: Denoise(d, self.tokens.mask_id, s)) if self.kind == SEQ2SEQ else (lambda d, s: d)
        return Data(
            wrap(self.tokens.train, 1), wrap(self.tokens.val, 2), self.tokens.vocab_size, self.seq_len, "tokens"
        )

    def build(self):
        """The model, fp32 (DeepSpeed casts it to the run's precision)."""
        import torch

        transformers = import_transformers()
        auto = transformers.AutoModelForSeq2SeqLM if self.kind == SEQ2SEQ else transformers.AutoModelForCausalLM
        if self.from_disk:
            try:
                model = auto.from_pretrained(self.name, local_files_only=True, dtype=torch.float32)
            except (OSError, ValueError) as err:
                raise TrainError(f"cannot load the model in {self.name}: {str(err).splitlines()[0]}") from None
        else:
            model = auto.from_config(self.config, dtype=torch.float32)
        if self.kind == CAUSAL and getattr(model, "loss_type", None) is None:
            model.loss_type = "ForCausalLM"  # what transformers falls back to anyway, without its warning
        return model

    def loss(self, engine, batch, device, dtype=None):
        """The batch's mean token loss (the model computes it, in fp32, from the labels)."""
        return engine(
            input_ids=batch["input_ids"].to(device, non_blocking=True),
            labels=batch["labels"].to(device, non_blocking=True),
        ).loss

    def flops_per_token(self, model) -> float:
        return flops_per_token(model, self.config, self.kind, self.seq_len)


def flops_per_token(model, config, kind: str, seq_len: int) -> float:
    """Training FLOPs per token: 6·N + 12·L·d·T (forward and backward of every matmul: Kaplan et
    al. 2020, section 2.1; with the attention term as PaLM writes it, Chowdhery et al. 2022,
    appendix B). N: the parameters a token multiplies through, i.e. all but the position
    embeddings (the token embedding counts once, as the tied output layer); L: layers; d: the
    attention width (heads x head size); T: --seq-len. Causal masking is not discounted (as in
    PaLM). An encoder-decoder's token passes the encoder and the decoder (N is both), and its
    decoder layers attend twice (self and cross): L = encoder layers + 2 x decoder layers."""
    n = sum(p.numel() for name, p in model.named_parameters() if not _position_embedding(name))
    if kind == SEQ2SEQ:
        width = config.num_heads * config.d_kv if hasattr(config, "d_kv") else config.d_model
        layers = config.num_layers + 2 * (getattr(config, "num_decoder_layers", None) or config.num_layers)
    else:
        width = _first(config, "n_embd", "hidden_size", "d_model")
        layers = _first(config, "n_layer", "num_hidden_layers", "num_layers")
    return 6.0 * n + 12.0 * layers * width * seq_len


def _position_embedding(name: str) -> bool:
    return name.endswith(("wpe.weight", "position_embeddings.weight", "embed_positions.weight"))


def _first(config, *names) -> int:
    for name in names:
        if getattr(config, name, None):
            return int(getattr(config, name))
    raise TrainError(f"cannot tell the model's {names[0]} from its config", hint="MFU needs layers and width")


def _named_config(name: str, vocab_size: int, seq_len: int):
    transformers = import_transformers()
    if name in GPT_SIZES:
        # bos/eos: GPT-2's 50256 lies outside a smaller vocabulary; the last id is the end of text here
        shape = dict(GPT_SIZES[name], vocab_size=vocab_size, bos_token_id=vocab_size - 1, eos_token_id=vocab_size - 1)
        shape["n_positions"] = max(shape["n_positions"], seq_len) if name == "gpt-tiny" else shape["n_positions"]
        return transformers.GPT2Config(**shape), CAUSAL
    shape = dict(T5_SIZES[name], vocab_size=vocab_size)
    # the original T5's: ReLU feed-forward, pad = decoder start = 0, eos = 1
    config = transformers.T5Config(**shape, feed_forward_proj="relu", pad_token_id=0, eos_token_id=1)
    config.decoder_start_token_id = 0
    return config, SEQ2SEQ


def _disk_config(path: str):
    transformers = import_transformers()
    try:
        config = transformers.AutoConfig.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError) as err:
        raise TrainError(f"cannot read the model config in {path}: {str(err).splitlines()[0]}") from None
    return config, (SEQ2SEQ if getattr(config, "is_encoder_decoder", False) else CAUSAL)


def _max_positions(config, kind: str) -> Optional[int]:
    if kind == SEQ2SEQ:
        return None  # T5's relative position buckets take any length
    return getattr(config, "n_positions", None) or getattr(config, "max_position_embeddings", None)


def prepare(args) -> Optional[LanguageModel]:
    """The run's language model, or None for a vision model. Every user error is raised here."""
    if not is_lm(args.model, args.data):
        return None
    seq_len = args.seq_len or DEFAULT_SEQ_LEN
    if seq_len < 2:
        raise TrainError("--seq-len must be at least 2")
    from_disk = args.model not in LM_SIZES
    if from_disk and not is_model_dir(args.model):
        raise TrainError(
            f"{args.data} is token data but {args.model!r} is not a language model",
            hint=f"use --model {' | '.join(LM_SIZES)} or a local model directory (config.json, weights, tokenizer)",
        )
    if args.data != SYNTHETIC and not args.data.endswith((".txt", ".jsonl")):
        raise TrainError(
            f"language model {args.model} needs token data, not {args.data!r}",
            hint="use --data synthetic-tokens or a local .txt / .jsonl file",
        )
    tokenizer_dir = args.tokenizer or (args.model if from_disk and _has_tokenizer(args.model) else None)
    if args.data == SYNTHETIC:
        vocab = (
            _disk_config(args.model)[0].vocab_size
            if from_disk
            else (GPT_SIZES.get(args.model) or T5_SIZES[args.model])["vocab_size"]
        )
        tokens = synthetic_tokens(args.synthetic_samples, vocab, seq_len, args.seed)
    else:
        tokens = text_tokens(args.data, seq_len, tokenizer_dir)
    if from_disk:
        config, kind = _disk_config(args.model)
        if tokens.vocab_size > config.vocab_size:
            raise TrainError(
                f"the data's vocabulary ({tokens.vocab_size} ids, {tokens.source}) is larger than the model's "
                f"({config.vocab_size})",
                hint="pass the model's own tokenizer with --tokenizer DIR",
            )
    else:
        config, kind = _named_config(args.model, tokens.vocab_size, seq_len)
    longest = _max_positions(config, kind)
    if longest is not None and seq_len > longest:
        raise TrainError(f"--seq-len {seq_len} is longer than {args.model}'s {longest} positions")
    return LanguageModel(args.model, kind, config, tokens, from_disk)


def perplexity(
    engine, lm: LanguageModel, dataset, rank: int, world_size: int, batch_size: int, device, limit, all_reduce
):
    """{"loss", "perplexity", "tokens"} over `dataset` split across ranks: the token-weighted mean
    loss (each rank's share padded to the same batch count, padding never counted)."""
    import torch
    import torch.nn.functional as F

    from .data import eval_shards

    length = min(len(dataset), limit) if limit else len(dataset)
    indices = eval_shards(length, rank, world_size)
    totals = torch.zeros(2, dtype=torch.float64, device=device)
    with torch.no_grad():
        for start in range(0, len(indices), batch_size):
            part = indices[start : start + batch_size]
            samples = [dataset[max(i, 0)] for i in part]
            ids = torch.stack([s["input_ids"] for s in samples]).to(device)
            labels = torch.stack([s["labels"] for s in samples]).to(device)
            labels[torch.tensor([i < 0 for i in part], device=device)] = -100  # padding: not counted
            if lm.kind == SEQ2SEQ:
                logits = engine(input_ids=ids, labels=labels).logits
                target = labels
            else:
                logits = engine(input_ids=ids).logits[:, :-1]
                target = labels[:, 1:]
            totals[0] += F.cross_entropy(
                logits.float().reshape(-1, logits.shape[-1]), target.reshape(-1), ignore_index=-100, reduction="sum"
            ).double()
            totals[1] += (target != -100).sum()
    all_reduce(totals)
    loss = totals[0].item() / max(totals[1].item(), 1.0)
    return {"loss": loss, "perplexity": math.exp(min(loss, 700.0)), "tokens": int(totals[1].item())}


def perplexity_line(result: dict, **extra) -> str:
    parts = [f"loss={result['loss']:.4f}", f"perplexity={result['perplexity']:.4f}", f"tokens={result['tokens']}"]
    return "[hpc-eval] " + " ".join(parts + [f"{k}={v}" for k, v in extra.items()])


def device_product(device_type: str) -> str:
    """The accelerator's product name as torch reports it (looked up in hpc_launch/train/peak_flops.py)."""
    import torch

    backend = getattr(torch, device_type, None)
    name = getattr(backend, "get_device_name", None)
    try:
        return str(name()) if callable(name) and device_type != "cpu" else device_type
    except (RuntimeError, AssertionError):
        return device_type


def token_rate(lm: LanguageModel, model, device_type: str, precision: str):
    """Tokens per sample, FLOPs per token and the device's peak, for the step lines."""
    from .metrics import TokenRate
    from .peak_flops import peak_tflops

    peak = peak_tflops(device_product(device_type), precision)
    return TokenRate(lm.seq_len, lm.flops_per_token(model), peak * 1e12 if peak else None)


def describe(lm: LanguageModel, model, rate, device_type: str) -> str:
    params = sum(p.numel() for p in model.parameters())
    device = device_product(device_type)
    peak = (
        f"{rate.peak_flops / 1e12:g} TFLOP/s ({device})"
        if rate.peak_flops
        else f"unknown ({device}: no peak in hpc_launch/train/peak_flops.py)"
    )
    return (
        f"[hpc-train] language model {lm.name}: {lm.kind}, {params / 1e6:.2f}M parameters, seq_len={lm.seq_len}, "
        f"vocab={lm.tokens.vocab_size} ({lm.tokens.source}), {rate.flops_per_token / 1e6:.1f} MFLOPs/token "
        f"(6N + 12LdT), peak {peak}"
    )


@dataclass(frozen=True)
class Shape:
    """What the planner's activation formula needs of a language model (hpc_launch/plan.py)."""

    kind: str
    encoder_layers: int  # a causal LM's layers; a T5's encoder layers
    decoder_layers: int  # 0 for a causal LM
    hidden: int
    heads: int
    vocab: int


def meta_model(spec: str, seq_len: int):
    """(model on the meta device: shapes only, Shape) of a named size or a local model directory."""
    import torch

    if spec in LM_SIZES:
        config, kind = _named_config(spec, (GPT_SIZES.get(spec) or T5_SIZES[spec])["vocab_size"], seq_len)
    elif is_model_dir(spec):
        config, kind = _disk_config(spec)
    else:
        raise TrainError(
            f"{spec!r} is not a language model", hint=f"use one of {', '.join(LM_SIZES)} or a model directory"
        )
    transformers = import_transformers()
    auto = transformers.AutoModelForSeq2SeqLM if kind == SEQ2SEQ else transformers.AutoModelForCausalLM
    with torch.device("meta"):
        model = auto.from_config(config)
    if kind == SEQ2SEQ:
        decoder = getattr(config, "num_decoder_layers", None) or config.num_layers
        shape = Shape(kind, config.num_layers, decoder, config.d_model, config.num_heads, config.vocab_size)
    else:
        layers = _first(config, "n_layer", "num_hidden_layers", "num_layers")
        hidden = _first(config, "n_embd", "hidden_size", "d_model")
        heads = _first(config, "n_head", "num_attention_heads", "num_heads")
        shape = Shape(kind, layers, 0, hidden, heads, config.vocab_size)
    return model, shape
