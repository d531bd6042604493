#!/usr/bin/env python3
"""Train a byte-level BPE tokenizer with DeepSeek-V4's exact text pipeline.

DeepSeek-V4's tokenizer.json (shared/docs/text.md):
- no normalizer;
- pre-tokenizer = Sequence of three Split(regex, behavior "Isolated", invert
  false), then ByteLevel(add_prefix_space false, trim_offsets true,
  use_regex false) which only maps bytes to GPT-2's printable alphabet;
- BPE model without unk token / byte fallback (every byte is in the alphabet);
- decoder ByteLevel; post-processor none (DeepSeek encodes BOS explicitly).
Special tokens are added tokens with `special: true`. Ids: BOS 0, EOS 1 (as in
DeepSeek, and as `bos_token_id`/`eos_token_id` in config.json), then the chat
tokens at the END of the vocabulary (DeepSeek places them at 128000+; we keep
their relative order but the tiny vocab puts them right after the BPE tokens).

`train_dsv4_tokenizer(texts, vocab_size, out_path)` writes tokenizer.json to
out_path and returns the `tokenizers.Tokenizer`. `write_tokenizer_config`
writes a DeepSeek-style tokenizer_config.json.
"""
from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

BOS = "<｜begin▁of▁sentence｜>"
EOS = "<｜end▁of▁sentence｜>"
USER = "<｜User｜>"
ASSISTANT = "<｜Assistant｜>"
THINK = "<think>"
END_THINK = "</think>"
# Placed first by the trainer (ids 0, 1).
LEADING_SPECIALS = [BOS, EOS]
# Appended after the learned vocabulary, in DeepSeek's relative order.
TRAILING_SPECIALS = [USER, ASSISTANT, THINK, END_THINK]

# The three Split patterns, character for character as in DeepSeek's
# tokenizer.json once JSON-decoded (CR and LF are literal characters).
SPLIT_PATTERNS = [
    "\\p{N}{1,3}",
    "[一-龥぀-ゟ゠-ヿ]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+"
    "|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+"
    "| ?[\\p{P}\\p{S}]+[\r\n]*"
    "|\\s*[\r\n]+"
    "|\\s+(?!\\S)"
    "|\\s+",
]


def dsv4_pre_tokenizer() -> pre_tokenizers.PreTokenizer:
    splits = [pre_tokenizers.Split(Regex(p), behavior="isolated", invert=False) for p in SPLIT_PATTERNS]
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)
    return pre_tokenizers.Sequence([*splits, byte_level])


def train_dsv4_tokenizer(texts: Iterable[str], vocab_size: int, out_path: str | Path) -> Tokenizer:
    """Train BPE on texts; vocab_size counts BPE tokens plus all special tokens."""
    n_trailing = len(TRAILING_SPECIALS)
    if vocab_size < 256 + len(LEADING_SPECIALS) + n_trailing:
        raise ValueError(f"vocab_size {vocab_size} is smaller than the byte alphabet plus special tokens")
    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = None
    tok.pre_tokenizer = dsv4_pre_tokenizer()
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - n_trailing,
        min_frequency=2,
        show_progress=False,
        special_tokens=[AddedToken(t, special=True, normalized=False) for t in LEADING_SPECIALS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(texts, trainer=trainer)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in TRAILING_SPECIALS])
    if tok.token_to_id(BOS) != 0 or tok.token_to_id(EOS) != 1:
        raise RuntimeError("BOS/EOS did not land at ids 0/1")
    # A small corpus may yield fewer merges than asked for; say so rather than
    # silently shipping a vocab of a different size.
    if tok.get_vocab_size() != vocab_size:
        raise RuntimeError(f"trained vocab has {tok.get_vocab_size()} entries, asked for {vocab_size}")
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tok.save(str(out_path))
    return tok


def write_tokenizer_config(out_path: str | Path, model_max_length: int) -> None:
    """tokenizer_config.json in DeepSeek-V4's style: no automatic BOS/EOS."""
    config = {
        "add_bos_token": False,
        "add_eos_token": False,
        "bos_token": BOS,
        "eos_token": EOS,
        "pad_token": EOS,
        "clean_up_tokenization_spaces": False,
        "legacy": True,
        "model_max_length": model_max_length,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": None,
    }
    Path(out_path).write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
