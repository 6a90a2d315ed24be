"""The language-model pieces without a launcher: a model directory and tokenizer the user has on
disk (read, never downloaded), packing, the denoising target, FLOPs per token, and one-line errors."""

import argparse
import json

import pytest

from ds_launch import run_python

from hpc_launch.train import lm, lm_data
from hpc_launch.train.errors import TrainError
from hpc_launch.train.lm_sizes import GPT_SIZES, T5_SIZES

pytestmark = pytest.mark.train

TEXT = "the cat sat on the mat. the dog sat on the log. " * 40


def _args(**kw):
    base = dict(model="gpt-tiny", data="synthetic-tokens", seq_len=16, tokenizer=None, synthetic_samples=64, seed=0)
    return argparse.Namespace(**{**base, **kw})


def _save_tokenizer(directory):
    """A word-level tokenizer built here from the text, saved as a user's tokenizer directory."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    PreTrainedTokenizerFast = lm.import_transformers().PreTrainedTokenizerFast

    words = sorted(set(TEXT.replace(".", " .").split()))
    vocab = {w: i for i, w in enumerate(["[UNK]", "[EOS]", *words])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", eos_token="[EOS]")
    fast.save_pretrained(directory)
    return len(vocab)


def test_a_local_model_directory_is_read_with_its_weights_and_tokenizer(tmp_path):
    import torch

    transformers = lm.import_transformers()  # torchvision first (hpc_launch/train/tv_compat.py)

    model_dir = tmp_path / "my-gpt"
    n_vocab = _save_tokenizer(model_dir)
    config = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, n_positions=64, vocab_size=n_vocab)
    saved = transformers.GPT2LMHeadModel(config)
    saved.save_pretrained(model_dir)
    text = tmp_path / "notes.txt"
    text.write_text(TEXT.replace(".", " ."))

    run = lm.prepare(_args(model=str(model_dir), data=str(text)))
    assert run.from_disk and run.kind == lm.CAUSAL
    assert run.tokens.source == str(model_dir) and run.tokens.vocab_size == n_vocab  # the directory's tokenizer
    first = run.tokens.train[0]["input_ids"].tolist()
    assert first[:4] == [vocab_id(model_dir, w) for w in ("the", "cat", "sat", "on")]
    loaded = run.build()
    for (name, a), b in zip(saved.state_dict().items(), loaded.state_dict().values()):
        assert torch.equal(a, b), name  # the user's weights, not a fresh initialisation
    with pytest.raises(TrainError, match="longer than .* 64 positions"):
        lm.prepare(_args(model=str(model_dir), data=str(text), seq_len=65))


def vocab_id(directory, word):
    return json.loads((directory / "tokenizer.json").read_text())["model"]["vocab"][word]


def test_text_is_packed_into_blocks_with_end_of_document_tokens_and_a_held_out_tail(tmp_path):
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in ("abc", "de")) * 20)  # 7 bytes a pair
    tokens = lm_data.text_tokens(str(path), seq_len=7, tokenizer_dir=None)
    assert tokens.vocab_size == 258 and tokens.source == "bytes"
    assert tokens.train[0]["input_ids"].tolist() == [97, 98, 99, 256, 100, 101, 256]
    assert len(tokens.train) + len(tokens.val) == 20 and len(tokens.val) == 1  # 5% of 20 blocks held out
    with pytest.raises(TrainError, match='line 1 has no string "text" field'):
        (tmp_path / "bad.jsonl").write_text('{"body": "x"}\n')
        lm_data.text_tokens(str(tmp_path / "bad.jsonl"), 4, None)
    with pytest.raises(TrainError, match="under two blocks"):
        lm_data.text_tokens(str(path), seq_len=1000, tokenizer_dir=None)


def test_synthetic_tokens_follow_their_successor_table_and_t5_gets_masked_spans():
    tokens = lm_data.synthetic_tokens(32, vocab_size=64, seq_len=200, seed=0)
    ids = tokens.train[3]["input_ids"].tolist()
    followed = sum(b == tokens.train.successor[a] for a, b in zip(ids, ids[1:])) / (len(ids) - 1)
    assert 0.8 < followed < 0.97 and max(ids) < 63  # id 63 is the mask
    assert tokens.train[3]["input_ids"].tolist() == ids  # a pure function of (seed, index)
    denoise = lm_data.Denoise(tokens.train, tokens.mask_id, seed=1)[3]
    masked = (denoise["input_ids"] == 63).float().mean().item()
    assert 0.05 < masked <= 0.1501 and denoise["labels"].tolist() == ids


def test_flops_per_token_of_gpt2_small_is_six_n_plus_the_attention_term():
    import torch

    transformers = lm.import_transformers()  # torchvision first (hpc_launch/train/tv_compat.py)

    with torch.device("meta"):
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**GPT_SIZES["gpt-125m"]))
    n = 124_439_808 - 1024 * 768  # GPT-2 small without its position embeddings
    assert lm.flops_per_token(model, model.config, lm.CAUSAL, 1024) == 6 * n + 12 * 12 * 768 * 1024
    config, kind = lm._named_config("t5-small", T5_SIZES["t5-small"]["vocab_size"], 512)
    assert kind == lm.SEQ2SEQ and config.feed_forward_proj == "relu" and config.num_decoder_layers == 6


def test_a_vision_model_on_token_data_is_one_line_naming_the_language_models(tmp_path):
    proc = run_python(["-m", "hpc_launch.train", "--model", "resnet18", "--data", "synthetic-tokens"], cwd=tmp_path)
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "gpt-tiny" in lines[0] and "not a language model" in lines[0], proc.stderr[-2000:]
    with pytest.raises(TrainError, match="needs token data"):
        lm.prepare(_args(data="digits"))


def test_the_standalone_eval_says_a_language_models_perplexity_comes_with_its_training(tmp_path, capsys):
    from hpc_launch.train import evaluate

    tag = tmp_path / "global_step4"
    tag.mkdir()
    (tag / "hpc_complete.json").write_text(json.dumps({"step": 4, "model": "gpt-tiny", "data": "synthetic-tokens"}))
    assert evaluate.main(["--checkpoint-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "gpt-tiny is a language model" in err[0] and "perplexity" in err[0], err
