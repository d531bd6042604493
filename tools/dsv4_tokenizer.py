"""DeepSeek-V4-style byte-level BPE tokenizers, built with the `tokenizers` library.

DeepSeek-V4's tokenizer.json (docs/text.md) has no normalizer, a pre-tokenizer
that is a Sequence of three Split(Isolated) regexes followed by
ByteLevel(add_prefix_space=false, use_regex=false), a BPE model and a ByteLevel
decoder. BOS/EOS/pad sit at ids 0..2 and the chat markers are added tokens
after the learned vocabulary. This module builds that pipeline so a small
tokenizer can be trained with the same behaviour:

    from dsv4_tokenizer import train_dsv4_tokenizer
    tok = train_dsv4_tokenizer(texts, vocab_size=4096, out_path="tokenizer.json")

Used by tools/gen_tokenizer_fixtures.py (test fixtures) and meant for training
the tokenizer of nibble's small shipped model.
"""
from __future__ import annotations

import json
import os
from typing import Iterable

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

# The three Split patterns of DeepSeek's pre-tokenizer, in order (text.md).
# 1. numbers in groups of up to three digits;
# 2. runs of CJK ideographs (U+4E00-U+9FA5), hiragana and katakana;
# 3. words with an optional leading ASCII punctuation or non-letter, symbol
#    runs, newline runs and whitespace (GPT-2 style, without contractions).
DSV4_SPLIT_PATTERNS = [
    r"\p{N}{1,3}",
    "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+"
    "|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+"
    "| ?[\\p{P}\\p{S}]+[\r\n]*"
    "|\\s*[\r\n]+"
    "|\\s+(?!\\S)"
    "|\\s+",
]

BOS = "<｜begin▁of▁sentence｜>"
EOS = "<｜end▁of▁sentence｜>"
PAD = "<｜▁pad▁｜>"

# Tokens the trainer places first (ids 0, 1, 2), as in DeepSeek's vocabulary.
DSV4_LEADING_SPECIALS = [BOS, EOS, PAD]

# Added after training, so their ids follow the learned vocabulary. Role and
# thinking markers are non-special (DeepSeek marks them "special": false, so
# decode(skip_special_tokens=True) keeps them); the task/reminder markers are
# special.
DSV4_ADDED_TOKENS = [
    ("<｜User｜>", False),
    ("<｜Assistant｜>", False),
    ("<think>", False),
    ("</think>", False),
    ("｜DSML｜", False),
    ("<｜latest_reminder｜>", True),
    ("<｜action｜>", True),
    ("<｜query｜>", True),
    ("<｜authority｜>", True),
    ("<｜domain｜>", True),
    ("<｜title｜>", True),
    ("<｜read_url｜>", True),
]


def dsv4_pre_tokenizer() -> pre_tokenizers.PreTokenizer:
    """DeepSeek's pre-tokenizer: three isolating Splits, then the byte map."""
    steps = [pre_tokenizers.Split(Regex(p), behavior="isolated", invert=False) for p in DSV4_SPLIT_PATTERNS]
    steps.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False))
    return pre_tokenizers.Sequence(steps)


def build_dsv4_tokenizer() -> Tokenizer:
    """An untrained tokenizer with DeepSeek-V4's pipeline (no normalizer)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = dsv4_pre_tokenizer()
    tok.decoder = decoders.ByteLevel()
    return tok


def check_dsv4_json(path: str) -> None:
    """Asserts that a saved tokenizer.json has DeepSeek's structure."""
    with open(path, encoding="utf-8") as f:
        j = json.load(f)
    assert j["normalizer"] is None, "DeepSeek has no normalizer"
    pt = j["pre_tokenizer"]
    assert pt["type"] == "Sequence" and len(pt["pretokenizers"]) == 4, pt
    for step, pattern in zip(pt["pretokenizers"][:3], DSV4_SPLIT_PATTERNS):
        assert step == {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False}, step
    bl = pt["pretokenizers"][3]
    assert bl["type"] == "ByteLevel" and bl["add_prefix_space"] is False and bl["use_regex"] is False, bl
    assert j["decoder"]["type"] == "ByteLevel", j["decoder"]
    assert j["model"]["type"] == "BPE", j["model"]["type"]
    added = {t["content"]: t for t in j["added_tokens"]}
    assert added[BOS]["id"] == 0 and added[EOS]["id"] == 1 and added[BOS]["special"], added


def train_dsv4_tokenizer(
    texts: Iterable[str],
    vocab_size: int,
    out_path: str | None = None,
    min_frequency: int = 2,
    added_tokens: list[tuple[str, bool]] | None = None,
) -> Tokenizer:
    """Trains a DeepSeek-V4-style byte-level BPE tokenizer.

    texts: training text (any iterable of str).
    vocab_size: size of the learned vocabulary including the 3 leading
        specials and the 256 byte tokens (the added chat tokens come on top).
    out_path: where to save tokenizer.json (skipped when None); the saved
        file is checked to have DeepSeek's structure.
    added_tokens: (content, special) pairs added after training; defaults to
        DSV4_ADDED_TOKENS.
    Returns the trained `tokenizers.Tokenizer`.
    """
    if vocab_size < 256 + len(DSV4_LEADING_SPECIALS):
        raise ValueError(f"vocab_size {vocab_size} is smaller than the byte alphabet plus specials")
    tok = build_dsv4_tokenizer()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        show_progress=False,
        special_tokens=[AddedToken(t, special=True, normalized=False) for t in DSV4_LEADING_SPECIALS],
        # All 256 bytes, so every input can be encoded (nibble refuses a
        # byte-level vocabulary that lacks one).
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(texts, trainer=trainer)
    extra = DSV4_ADDED_TOKENS if added_tokens is None else added_tokens
    tok.add_tokens([AddedToken(c, special=s, normalized=False) for c, s in extra])
    if out_path is not None:
        os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
        tok.save(out_path, pretty=False)
        check_dsv4_json(out_path)
    return tok
