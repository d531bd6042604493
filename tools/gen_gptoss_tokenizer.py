#!/usr/bin/env python3
"""gpt-oss's tokenizer.json, rebuilt from tiktoken's o200k ranks, and a corpus
tokenized by tiktoken (the oracle).

gpt-oss publishes the Hugging Face conversion of tiktoken's "o200k_harmony"
encoding: the o200k_base ranks as a ByteLevel BPE (transformers'
TikTokenConverter: vocab = ranks, merges = every split of a token into two
tokens, by rank; ignore_merges so that a piece that is a token is emitted
whole, as tiktoken does), one Split pre-tokenizer with o200k's regex, and the
21 added tokens 199998..200018 of its tokenizer_config.json. tiktoken's
o200k_harmony also names <|reserved_200019|>..<|reserved_201087|>; the
published files do not (the embedding has 201088 rows; those ids are never
produced), and neither does this one.

Writes:
  tests/fixtures/tokenizer/gptoss_tokenizer.tar.xz
      tokenizer.json, tokenizer_config.json, special_tokens_map.json (as
      published); CMake unpacks it into <build>/gptoss-tokenizer/
  tests/fixtures/tokenizer/gptoss_cases.json
      cases:   text, ids (tiktoken encode, all specials allowed),
               ids_no_special (encode_ordinary; only when it differs)
      decodes: random id sequences and tiktoken's decode (errors="replace")

Needs tiktoken, transformers and tokenizers (tools/requirements.txt), and
o200k_base.tiktoken, which is offline-loadable from tiktoken's cache: the
litellm wheel ships it under the cache key name, so

  pip download --no-deps litellm && unzip litellm-*.whl \\
      'litellm/litellm_core_utils/tokenizers/fb374d419588a4632f3f557e76b4b70aebbca790'
  TIKTOKEN_CACHE_DIR=litellm/litellm_core_utils/tokenizers python tools/gen_gptoss_tokenizer.py

(tiktoken checks the file's SHA-256 against the one in its source).
"""
from __future__ import annotations

import io
import json
import lzma
import pathlib
import random
import sys
import tarfile

import tiktoken
from tokenizers import AddedToken, Tokenizer
from transformers.convert_slow_tokenizer import TikTokenConverter

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import gen_tokenizer_fixtures as base  # noqa: E402  (its text pools and fragment mixer)

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "tokenizer"
SEED = 20250805

# The published tokenizer_config.json's added_tokens_decoder (gpt-oss-20b and
# -120b have the same): every one special, none normalized or stripped.
ADDED = {
    199998: "<|startoftext|>", 199999: "<|endoftext|>", 200000: "<|reserved_200000|>", 200001: "<|reserved_200001|>",
    200002: "<|return|>", 200003: "<|constrain|>", 200004: "<|reserved_200004|>", 200005: "<|channel|>",
    200006: "<|start|>", 200007: "<|end|>", 200008: "<|message|>", 200009: "<|reserved_200009|>",
    200010: "<|reserved_200010|>", 200011: "<|reserved_200011|>", 200012: "<|call|>", 200013: "<|reserved_200013|>",
    200014: "<|reserved_200014|>", 200015: "<|reserved_200015|>", 200016: "<|reserved_200016|>",
    200017: "<|reserved_200017|>", 200018: "<|endofprompt|>",
}


def harmony_encoding() -> tiktoken.Encoding:
    """tiktoken's o200k_harmony, checked against the ids the published
    config gives (so a tiktoken that renumbers them fails here), cut to the
    published added tokens."""
    enc = tiktoken.get_encoding("o200k_harmony")
    for i, s in ADDED.items():
        got = enc.encode(s, allowed_special="all")
        if got != [i]:
            raise SystemExit(f"tiktoken o200k_harmony encodes {s!r} as {got}, the published config says {i}")
    # The oracle for the published files: the same ranks and regex with
    # only the added tokens they name (<|reserved_200019|> is then text).
    return tiktoken.Encoding(name="o200k_gptoss", pat_str=enc._pat_str, mergeable_ranks=enc._mergeable_ranks,
                             special_tokens={s: i for i, s in ADDED.items()})


def build_tokenizer(enc: tiktoken.Encoding) -> Tokenizer:
    conv = TikTokenConverter(vocab_file=None, pattern=enc._pat_str)
    # The converter reads a .tiktoken file; hand it the ranks already loaded.
    conv.load_tiktoken_bpe = lambda _url: enc._mergeable_ranks  # type: ignore[method-assign]
    tok = conv.converted()
    if tok.get_vocab_size() != 199998:
        raise SystemExit(f"o200k_base should have 199998 ranks, the conversion has {tok.get_vocab_size()}")
    # Added in id order: tokenizers numbers new tokens from the vocabulary's end.
    tok.add_special_tokens([AddedToken(ADDED[i], normalized=False, special=True) for i in sorted(ADDED)])
    for i, s in ADDED.items():
        if tok.token_to_id(s) != i:
            raise SystemExit(f"added token {s!r} got id {tok.token_to_id(s)}, expected {i}")
    return tok


def tokenizer_config() -> dict:
    entry = lambda s: {"content": s, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
                       "special": True}
    return {
        "added_tokens_decoder": {str(i): entry(ADDED[i]) for i in sorted(ADDED)},
        "bos_token": "<|startoftext|>",
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|return|>",
        "extra_special_tokens": {},
        "model_input_names": ["input_ids", "attention_mask"],
        "model_max_length": 1000000000000000019884624838656,
        "pad_token": "<|endoftext|>",
        "tokenizer_class": "PreTrainedTokenizerFast",
    }


def write_archive(path: pathlib.Path, files: dict[str, bytes]) -> None:
    """A reproducible .tar.xz: fixed order, owner and times."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name in sorted(files):
            info = tarfile.TarInfo(name)
            info.size = len(files[name])
            info.mtime = 0
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(files[name]))
    path.write_bytes(lzma.compress(raw.getvalue(), preset=9 | lzma.PRESET_EXTREME))


# ---------------------------------------------------------------- corpus

# What o200k's split treats apart from GPT-2 and cl100k: letter runs split by
# case (an upper run then a lower run), Lt/Lm/Lo/M in both classes, case-
# insensitive contractions as a suffix of the word, digits in threes, '/'
# kept after a symbol run, and CR/LF never inside a letter run's prefix.
O200K_FIXED = [
    "camelCaseWords", "HTTPSession", "XMLHttpRequest", "iPhone", "McDONALD", "ǅemal ǈubljana ǋ", "ʰʲʷ modifier ʰa",
    "DON'T", "Don'T", "don'T", "WE'LL we'Ll", "HE'S she'S", "I'M", "they'RE", "you'VE", "it'D", "'S alone", "x's'S",
    "l'homme", "rock'n'roll", "O'Neil's", "ca'n't", "’s curly", "dog's'll",
    "12345678901", "1 22 333 4444 55555", "٠١٢٣٤٥٦", "ⅦⅧ", "3,141,592", "0.000001", "1e100",
    "a//b", "http://x.y/z/", "!!/\n/\r\n", " -->/", "...\n\n\n", " ?\r\n", "a/\nb", ")/\n/", "\"/\"",
    "\r\nabc", "\rA", "\nHello", "x\r\n\r\n\r\n", "  \r\n  \n", "\t\n\t\n", "foo  \n  bar", "end   ",
    "नमस्ते", "ที่นี่", "עִבְרִית", "e\u0301e\u0301E\u0301", "A\u0301BC\u0301d", "\u0301\u0301", "क्षत्रिय",
    "ﬁﬂ", "Ⅻ", "µ", "ß SS ẞ", "İı", "ΣΑΣ σας", "Ǳ ǲ ǳ",
    "<|start|>user<|message|>Hi<|end|><|start|>assistant", "<|channel|>analysis<|message|>think<|end|>",
    "<|start|>assistant<|channel|>final<|message|>ok<|return|>", "<|constrain|>json<|call|>", "<|endofprompt|>",
    "<|reserved_200013|><|reserved_200017|>", "<|reserved_200019|>", "<|start|", "|start|>", "<|<|start|>|>",
    "<|endoftext|> text <|startoftext|>",
]


def random_codepoints(rng: random.Random) -> str:
    """Characters from blocks the classes disagree on: marks, Lm, Lt, Lo of
    several scripts, symbols, digits of other scripts. Planes beyond the BMP
    only from long-assigned blocks, so that the Unicode versions of tiktoken's
    regex and PCRE2 agree."""
    blocks = [(0x20, 0x7E), (0xA0, 0x24F), (0x250, 0x2FF), (0x300, 0x36F), (0x370, 0x3FF), (0x400, 0x52F),
              (0x591, 0x5F4), (0x600, 0x6FF), (0x900, 0x97F), (0xE00, 0xE5B), (0x1E00, 0x1EFF), (0x2000, 0x206F),
              (0x20A0, 0x20BF), (0x2100, 0x218B), (0x2190, 0x23FF), (0x2460, 0x24FF), (0x3000, 0x30FF),
              (0x4E00, 0x4FFF), (0xAC00, 0xAD00), (0xFF00, 0xFFEF), (0x1F300, 0x1F64F), (0x1D400, 0x1D7FF)]
    out = []
    for _ in range(rng.randint(1, 20)):
        lo, hi = rng.choice(blocks)
        out.append(chr(rng.randint(lo, hi)))
        if rng.random() < 0.2:
            out.append(rng.choice([" ", "  ", "\n", "'s", "'S", "/", "\r\n", "1"]))
    return "".join(out)


def corpus(specials: list[str]) -> list[str]:
    base.ENGLISH_WORDS.extend(base.english_words(base.stdlib_texts()))
    strings = base.test_strings(specials, SEED)  # >= 1,100 mixed strings and the fixed list
    strings += O200K_FIXED
    rng = random.Random(SEED + 1)
    strings += [random_codepoints(rng) for _ in range(400)]
    # Real prose and code as they come: the tiktoken regex's long runs.
    for text in base.stdlib_texts()[:40]:
        strings.append(text[:3000])
    return strings


def encode_cases(enc: tiktoken.Encoding, tok: Tokenizer, strings: list[str]) -> list[dict]:
    cases = []
    for s in strings:
        ids = enc.encode(s, allowed_special="all")
        plain = enc.encode_ordinary(s)
        # The converted file must agree with tiktoken too, or it is not the
        # published conversion; checked here, in Python, before any C++ runs.
        hf = tok.encode(s, add_special_tokens=False).ids
        if hf != ids:
            raise SystemExit(f"tokenizers disagrees with tiktoken on {s!r}: {hf} vs {ids}")
        case = {"text": s, "ids": ids}
        if plain != ids:
            case["ids_no_special"] = plain
        cases.append(case)
    return cases


def random_decodes(enc: tiktoken.Encoding, seed: int, count: int = 400) -> list[dict]:
    rng = random.Random(seed)
    ids_pool = list(ADDED)
    out = []
    for _ in range(count):
        n = rng.randint(1, 10)
        ids = [rng.choice(ids_pool) if rng.random() < 0.05 else rng.randrange(199998) for _ in range(n)]
        out.append({"ids": ids, "text": enc.decode(ids, errors="replace")})
    return out


def main() -> None:
    enc = harmony_encoding()
    tok = build_tokenizer(enc)
    tokenizer_json = tok.to_str(pretty=True).encode("utf-8")
    cfg = (json.dumps(tokenizer_config(), indent=2) + "\n").encode("utf-8")
    stm = (json.dumps({"bos_token": "<|startoftext|>", "eos_token": "<|return|>", "pad_token": "<|endoftext|>"},
                      indent=2) + "\n").encode("utf-8")
    archive = OUT / "gptoss_tokenizer.tar.xz"
    write_archive(archive, {"tokenizer.json": tokenizer_json, "tokenizer_config.json": cfg,
                            "special_tokens_map.json": stm})
    print(f"{archive}: {archive.stat().st_size} bytes (tokenizer.json {len(tokenizer_json)} bytes)")

    strings = corpus(list(ADDED.values()))
    cases = {
        "encoding": "o200k_harmony with the 21 published added tokens",
        "tiktoken": tiktoken.__version__,
        "cases": encode_cases(enc, tok, strings),
        "decodes": random_decodes(enc, SEED + 2),
    }
    path = OUT / "gptoss_cases.json"
    path.write_text(json.dumps(cases, ensure_ascii=False, indent=None, separators=(",", ":")) + "\n", encoding="utf-8")
    print(f"{path}: {len(cases['cases'])} cases, {len(cases['decodes'])} decodes")


if __name__ == "__main__":
    main()
