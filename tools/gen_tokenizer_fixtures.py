#!/usr/bin/env python3
"""Tokenizer fixtures: two small trained byte-level BPE tokenizers and the ids
the `tokenizers` library gives for >= 1,000 varied strings each.

Writes tests/fixtures/tokenizer/:
  dsv4_tokenizer.json   DeepSeek-V4 pipeline (tools/dsv4_tokenizer.py), 4096 vocab
  gpt2_tokenizer.json   GPT-2 style: ByteLevel(use_regex=true), 2048 vocab, with
                        added tokens exercising special/non-special, normalized,
                        lstrip/rstrip and single_word matching
  dsv4_cases.json, gpt2_cases.json
      cases:    text, ids (specials allowed), ids_no_special (only when they
                differ: tokenizers' encode_special_tokens=True),
                decoded_skip_special (only when it differs from text)
      decodes:  random id sequences and tokenizers' decode of them, with and
                without skip_special_tokens (ill-formed UTF-8 -> U+FFFD)
      variants (gpt2 only): ids after a JSON merge patch of the tokenizer
                (ByteLevel add_prefix_space=true; BPE ignore_merges=true)
  pre_tokenizer_cases.json
      pre-tokenizer configurations (Split behaviours, invert, Digits,
      ByteLevel options, DeepSeek's and a Llama-3 style sequence) and the
      pieces tokenizers' pre_tokenize_str produces for a set of strings.

Training text comes from the Python standard library (docstrings, some
source files, the LICENSE) plus seeded synthetic multilingual sentences, so
everything is local and deterministic for a given Python/tokenizers version.
"""
from __future__ import annotations

import contextlib
import importlib
import inspect
import io
import json
import os
import pathlib
import random
import sys

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import dsv4_tokenizer  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "tokenizer"
SEED = 20240731

# ---------------------------------------------------------------- text pools

CJK = ("的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可她里后小么心多天而"
       "能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头面公同三已老从动两长知民样现分将外但身些与高"
       "意进把法此实回二理美点月明其种声全工己话儿者向情部正名定女问力机给等几很业最间新什打便位因重被走电四第门相次东政"
       "海口使教西再平真听世气信北少关并内加化由却代军产入先山五太水万市眼体别处总才场师书比住员九笑性通目华报立马命张活"
       "难神数件安表原车白应路期叫死常提感金何更反合放做系计或司利受光王果亲界及今京务制解各任至清物台象记边共风战干接它"
       "许八特觉望直服毛林题建南度统色字请交爱让认算论百吃义科怎元社术结六功指思非流每青管夫连远资队跟带花快条院变联言权"
       "毕老师龥鿿")
WORDS = {
    "ja": ["こんにちは", "ありがとう", "カタカナ", "テスト", "です", "ます", "日本語", "東京", "ひらがな", "コンピューター",
           "ラーメン", "さくら", "ゲーム", "ですか", "ニュース", "ー", "ヴ", "ゐ"],
    "ko": ["안녕하세요", "감사합니다", "한국어", "서울", "사랑", "컴퓨터", "학교", "친구", "오늘", "날씨"],
    "ru": ["привет", "мир", "Москва", "человек", "время", "работа", "жизнь", "сегодня", "хорошо", "спасибо",
           "Ёлка", "объявление", "съезд", "ПРАВДА", "Україна", "їжак", "беларуская", "ў"],
    "ar": ["مرحبا", "العالم", "كتاب", "السلام", "عليكم", "شكرا", "مدينة", "مُحَمَّد", "اللُّغَة", "العربية", "ﷺ", "٣"],
    "he": ["שלום", "עולם", "עִבְרִית", "ספר"],
    "hi": ["नमस्ते", "दुनिया", "भारत", "हिन्दी", "किताब", "धन्यवाद", "क्षत्रिय", "ज़िंदगी", "श्री", "अंग्रेज़ी"],
    "th": ["สวัสดี", "ภาษาไทย", "ขอบคุณ", "ครับ", "ประเทศ", "กรุงเทพ", "น้ำ", "ผู้ใหญ่", "เด็ก", "ไม่"],
    "el": ["γειά", "κόσμος", "Ελληνικά", "ψυχή", "ΑΘΗΝΑ", "ς"],
    "latin": ["café", "naïve", "Straße", "façade", "smörgåsbord", "Ångström", "œuvre", "ĳssel", "Æsir", "ﬁne", "Ǆemal",
              "İstanbul", "ığdır", "Đà Nẵng", "tiếng Việt", "Kraków", "Ñandú"],
}
EMOJI = ["😀", "👍", "👍🏽", "👍🏿", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇺🇸", "🇯🇵", "❤️", "✨", "🧑🏿‍💻", "👩🏼‍🔬", "🤷‍♂️",
         "🐍", "🔥", "1️⃣", "#️⃣", "🫠", "🥲", "©️", "™", "☕", "🏴‍☠️", "👁️‍🗨️", "💯", "🎉🎉🎉"]
COMBINING = ["e\u0301", "n\u0303", "a\u0308\u0304", "Z\u0334\u0321\u0322\u031b\u0353a\u0337l\u0338g\u0336o", "A\u030a",
             "\u0301", "\u20dd", "x\u0332y\u0332", "ก\u0e34\u0e4a", "क\u094d\u0937"]
DIGITS_EXTRA = ["٠١٢٣٤٥٦٧٨٩", "०१२३४", "๑๒๓", "１２３４５", "²³", "½¼¾", "ⅫⅣ", "①②③", "𝟘𝟙𝟚", "3.14159", "1,000,000",
                "0x7FFF", "1e-10", "-42", "v2.0.1", "2024-07-31"]
WHITESPACE = [" ", "  ", "   ", "\t", "\t\t", "\n", "\r\n", "\n\n", "\r", " \n ", "\n\n\n", "\u00a0", "\u3000", "\u2028",
              "\u2029", "\u0085", "\u200b", "\ufeff", "\x0b", "\x0c", "   \t  ", " \r\n\r\n ", "\u2003\u2009", "\u180e"]
PUNCT = ["!!!", "...", "?!", "—", "–", "“quoted”", "«»", "、", "。", "！", "？", "（）", "【】", "¿¡", "…", "@#$%^&*",
         "~~~", "<<>>", "===", "->", "=>", "::", "//", "/*", "*/", "{{", "}}", "'", "\"", "`", "'s", "'t", "'re", "'LL",
         "(", ")", "[", "]", "\\", "|", "_", "__init__", "-", ",", ";", "$", "€", "¥", "°C", "§", "¶", "†", "‰",
         "＋", "＝", "·"]
CONTROL = ["\x00", "\x01", "\x07", "\x1b[31m", "\x7f", "\x1f"]
CODE = [
    "def f(x):\n    return x * 2\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}",
    '{"key": [1, 2.5, null, true], "nested": {"a": "b"}}',
    "<div class=\"x\">Hello &amp; bye</div>",
    "SELECT * FROM users WHERE id = 42;",
    "#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 1); }",
    "x = [i**2 for i in range(10) if i % 2 == 0]",
    "fn main() -> Result<(), Box<dyn Error>> { Ok(()) }",
    "$ ls -la | grep '^d' > out.txt 2>&1",
    "if (a && b || !c) { return a ?? b; }",
    "    \n        indented\n\t\tmixed\n",
    "https://example.com/path/to?q=1&r=%20x#frag",
    "user.name+tag@example.org",
    "C:\\Users\\nibble\\file.txt",
]
CONTRACTIONS = ["don't", "I'm", "we'll", "they've", "She'd", "IT'S", "you're", "can't", "o'clock", "rock'n'roll"]


def stdlib_texts() -> list[str]:
    """Docstrings of a fixed list of standard-library modules, some of their
    source, the LICENSE and the Zen of Python."""
    names = ["os", "re", "json", "collections", "itertools", "functools", "argparse", "textwrap", "string",
             "dataclasses", "pathlib", "subprocess", "unittest", "email.message", "http.client", "csv", "datetime",
             "decimal", "fractions", "heapq", "logging", "random", "statistics", "shutil", "tempfile", "threading",
             "difflib", "html", "inspect", "ast", "enum", "abc", "contextlib", "calendar", "codecs", "locale"]
    texts = []
    for name in names:
        mod = importlib.import_module(name)
        if mod.__doc__:
            texts.append(mod.__doc__)
        for _, obj in sorted(inspect.getmembers(mod), key=lambda kv: kv[0]):
            doc = getattr(obj, "__doc__", None)
            if isinstance(doc, str) and (inspect.isfunction(obj) or inspect.isclass(obj)) and obj.__module__ == name:
                texts.append(doc)
    for name in ["textwrap", "heapq", "string", "fractions", "difflib"]:
        texts.append(pathlib.Path(importlib.import_module(name).__file__).read_text(encoding="utf-8"))
    lic = pathlib.Path(sys.prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "LICENSE.txt"
    if lic.exists():
        texts.append(lic.read_text(encoding="utf-8"))
    with contextlib.redirect_stdout(io.StringIO()):
        import this  # the Zen of Python, stored rot13 in this.s
    texts.append("".join(this.d.get(c, c) for c in this.s))
    return texts


def synthetic_sentence(rng: random.Random) -> str:
    """A sentence in one script, words drawn with a skewed distribution so
    that BPE finds merges in every script."""
    script = rng.choice(list(WORDS) + ["zh", "zh", "emoji", "digits"])
    if script == "zh":
        n = rng.randint(4, 30)
        body = "".join(CJK[min(int(rng.expovariate(1 / 60)), len(CJK) - 1)] for _ in range(n))
        return body + rng.choice(["。", "！", "？", "，", ""])
    if script == "emoji":
        return " ".join(rng.choice(EMOJI) for _ in range(rng.randint(1, 6)))
    if script == "digits":
        return " ".join(str(rng.randint(0, 10 ** rng.randint(1, 9))) for _ in range(rng.randint(1, 6)))
    words = WORDS[script]
    sep = "" if script in ("th", "ja") else " "
    n = rng.randint(2, 12)
    body = sep.join(words[min(int(rng.expovariate(1 / 3)), len(words) - 1)] for _ in range(n))
    return body + rng.choice([".", "!", "?", ",", "", "\n"])


def training_corpus() -> list[str]:
    rng = random.Random(SEED)
    texts = stdlib_texts()
    texts += [synthetic_sentence(rng) for _ in range(30000)]
    texts += CODE * 20
    return texts


# ---------------------------------------------------------------- test strings

def fragment(rng: random.Random, specials: list[str]) -> str:
    kind = rng.choice(["word", "word", "word", "script", "script", "zh", "emoji", "combining", "digits", "ws", "punct",
                       "code", "contraction", "special", "special_partial", "control", "sentence"])
    if kind == "word":
        return rng.choice(ENGLISH_WORDS)
    if kind == "script":
        return rng.choice(WORDS[rng.choice(list(WORDS))])
    if kind == "zh":
        return "".join(rng.choice(CJK) for _ in range(rng.randint(1, 12)))
    if kind == "emoji":
        return rng.choice(EMOJI)
    if kind == "combining":
        return rng.choice(COMBINING)
    if kind == "digits":
        if rng.random() < 0.5:
            return "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 12)))
        return rng.choice(DIGITS_EXTRA)
    if kind == "ws":
        return rng.choice(WHITESPACE)
    if kind == "punct":
        return rng.choice(PUNCT)
    if kind == "code":
        return rng.choice(CODE)
    if kind == "contraction":
        return rng.choice(CONTRACTIONS)
    if kind == "special":
        return rng.choice(specials)
    if kind == "special_partial":
        s = rng.choice(specials)
        return s[: rng.randint(1, max(1, len(s) - 1))]
    if kind == "control":
        return rng.choice(CONTROL)
    return synthetic_sentence(rng)


def test_strings(specials: list[str], seed: int) -> list[str]:
    rng = random.Random(seed)
    fixed = [
        "", " ", "  ", "\n", "\r\n", "\t", "a", "A", "ab", "abc", "Hello, world!", "Hello! 毕老师！1 + 1 = 2 ĠÑĤÐ²ÑĬÑĢ",
        "hello world", " hello", "hello ", "  leading and trailing  ", "a\n\nb", "a \n b", "x\r\n\r\ny", "tab\there",
        "1234567890", "123 4567 89", "3.14159265358979", "٠١٢٣٤٥٦٧٨٩", "²³½", "Ⅻ", "１２３", "1,234,567.89",
        "毕老师", "中文分词测试。", "日本語のテキストです。カタカナもある", "한국어 텍스트", "Привет, мир!", "مرحبا بالعالم",
        "नमस्ते दुनिया", "สวัสดีครับ", "שלום עולם", "Γειά σου Κόσμε", "👨‍👩‍👧‍👦", "👍🏽👍🏿", "🇺🇸🇯🇵", "🏳️‍🌈",
        "e\u0301", "Z\u0334\u0321a\u0337l\u0338g\u0336o", "\u200b\u200c\u200d", "\ufeffBOM", "a\u00a0b\u3000c",
        "line\u2028sep\u2029para", "nel\u0085x", "don't I'm we'll they've IT'S", "!!!???...", " !!! ", "foo.bar",
        "a-b_c/d\\e", "(x)", "[[nested]]", "{\"json\": 1}", "    indented", "\n    \n", "a" * 100, " " * 64,
        "\n" * 20, "9" * 50, "ab" * 60, "毕" * 80, "🔥" * 30, "Straße" * 12, "\t \t \n" * 10,
        "supercalifragilisticexpialidociousantidisestablishmentarianism" * 2,
    ]
    # docs/text.md's DeepSeek test vectors (their ids there need the real vocabulary).
    fixed += ["<｜User｜>你好<｜Assistant｜><think>推理</think>答案<｜end▁of▁sentence｜>",
              "<｜begin▁of▁sentence｜>S<｜User｜>U1<｜Assistant｜></think>A1<｜end▁of▁sentence｜><｜User｜>U2"
              "<｜Assistant｜></think>"]
    for s in specials:
        fixed += [s, "x" + s + "y", " " + s + " ", s + s, s[:-1], s[1:], "hello" + s + "\n" + s + "world"]
    out = list(fixed)
    while len(out) < 1100:
        n = rng.randint(1, 12)
        seps = ["", " ", " ", "  ", "\n", "\t", ", ", ". "]
        out.append("".join(fragment(rng, specials) + rng.choice(seps) for _ in range(n)))
    # Long inputs: BPE's heap path (words over 48 bytes) and the word cache.
    long_seed = random.Random(seed + 1)
    for _ in range(10):
        out.append(" ".join(fragment(long_seed, specials) for _ in range(long_seed.randint(40, 100))))
    return out


ENGLISH_WORDS: list[str] = []


def english_words(texts: list[str]) -> list[str]:
    words = sorted({w for t in texts[:400] for w in t.split() if w.isascii() and 1 < len(w) < 15})
    return words


# ---------------------------------------------------------------- tokenizers

def train_gpt2_style(texts: list[str]) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=2048, min_frequency=2, show_progress=False,
                                  special_tokens=[AddedToken("<|endoftext|>", special=True, normalized=False)],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    tok.add_tokens([
        AddedToken("<|im_start|>", special=True, normalized=False),
        AddedToken("<|im_end|>", special=True, normalized=False),
        AddedToken("<|im", special=False, normalized=True),  # overlaps a special: matched in pass 2 only
        AddedToken("[NS]", special=False, normalized=True),
        AddedToken("<mask>", special=True, normalized=False, lstrip=True),
        AddedToken("<sep>", special=False, normalized=False, rstrip=True),
        AddedToken("<both>", special=False, normalized=True, lstrip=True, rstrip=True),
        AddedToken("foo", special=False, normalized=True, single_word=True),
        AddedToken("Ġzz", special=False, normalized=True),  # content made of byte stand-ins: decodes to " zz"
    ])
    return tok


def encode_cases(tok: Tokenizer, strings: list[str]) -> list[dict]:
    cases = []
    for s in strings:
        tok.encode_special_tokens = False
        ids = tok.encode(s, add_special_tokens=False).ids
        tok.encode_special_tokens = True
        ids_plain = tok.encode(s, add_special_tokens=False).ids
        tok.encode_special_tokens = False
        case = {"text": s, "ids": ids}
        if ids_plain != ids:
            case["ids_no_special"] = ids_plain
        skipped = tok.decode(ids, skip_special_tokens=True)
        if skipped != s:
            case["decoded_skip_special"] = skipped
        full = tok.decode(ids, skip_special_tokens=False)
        if full != s:
            case["decoded"] = full  # lstrip/rstrip tokens drop the spaces they absorbed
        cases.append(case)
    return cases


def random_decodes(tok: Tokenizer, seed: int, count: int = 300) -> list[dict]:
    rng = random.Random(seed)
    n = tok.get_vocab_size(with_added_tokens=True)
    out = []
    for _ in range(count):
        ids = [rng.randrange(n) for _ in range(rng.randint(1, 16))]
        out.append({"ids": ids, "text": tok.decode(ids, skip_special_tokens=False),
                    "text_skip_special": tok.decode(ids, skip_special_tokens=True)})
    return out


def merge_patch(target, patch):
    """RFC 7386 JSON merge patch (what nlohmann::json::merge_patch does)."""
    if not isinstance(patch, dict):
        return patch
    target = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            target.pop(k, None)
        else:
            target[k] = merge_patch(target.get(k), v)
    return target


def write_json(path: pathlib.Path, obj) -> None:
    path.write_text(json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n", encoding="utf-8")


# ---------------------------------------------------------------- pre-tokenizers

def pre_tokenizer_configs() -> list:
    P = pre_tokenizers
    bl = P.ByteLevel(add_prefix_space=False, use_regex=False)
    configs = []
    for behavior in ["removed", "isolated", "merged_with_previous", "merged_with_next", "contiguous"]:
        for invert in [False, True]:
            configs.append(P.Sequence([P.Split("-", behavior, invert=invert), bl]))
            configs.append(P.Sequence([P.Split(Regex(r"\s+|[,.;]"), behavior, invert=invert), bl]))
    configs += [
        P.Sequence([P.Digits(individual_digits=True), bl]),
        P.Sequence([P.Digits(individual_digits=False), bl]),
        P.ByteLevel(add_prefix_space=True, use_regex=True),
        P.ByteLevel(add_prefix_space=False, use_regex=True),
        P.Sequence([P.Split(" ", "isolated"), P.ByteLevel(add_prefix_space=True, use_regex=False)]),
        P.Sequence([P.Split(Regex("x*"), "isolated"), bl]),
        P.Sequence([P.Split(Regex("(?=a)"), "merged_with_next"), bl]),
        # Escapes whose meaning differs between Oniguruma and PCRE2, and
        # Ruby-style line anchors.
        P.Sequence([P.Split(Regex(r"\w+"), "isolated"), bl]),
        P.Sequence([P.Split(Regex(r"\W+"), "removed"), bl]),
        P.Sequence([P.Split(Regex(r"[\w\s]+"), "isolated"), bl]),
        P.Sequence([P.Split(Regex(r"\S+"), "isolated"), bl]),
        P.Sequence([P.Split(Regex(r"\h+"), "isolated"), bl]),
        P.Sequence([P.Split(Regex(r"^ +|\d+$|^$"), "isolated"), bl]),
        dsv4_tokenizer.dsv4_pre_tokenizer(),
        # Llama-3 / Qwen style: case-insensitive contractions, 1-3 digit groups.
        P.Sequence([P.Split(Regex(r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                                  r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"), "isolated"), bl]),
    ]
    return configs


def pre_tokenizer_cases(strings: list[str]) -> list[dict]:
    out = []
    for pt in pre_tokenizer_configs():
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pt
        config = json.loads(tok.to_str())["pre_tokenizer"]
        cases = [{"text": s, "pieces": [p for p, _ in pt.pre_tokenize_str(s)]} for s in strings]
        out.append({"config": config, "cases": cases})
    return out


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    texts = training_corpus()
    ENGLISH_WORDS.extend(english_words(texts))

    dsv4_path = OUT / "dsv4_tokenizer.json"
    dsv4 = dsv4_tokenizer.train_dsv4_tokenizer(texts, vocab_size=4096, out_path=str(dsv4_path))
    dsv4_specials = dsv4_tokenizer.DSV4_LEADING_SPECIALS + [c for c, _ in dsv4_tokenizer.DSV4_ADDED_TOKENS]
    dsv4_strings = test_strings(dsv4_specials, SEED + 10)
    write_json(OUT / "dsv4_cases.json", {
        "tokenizer": dsv4_path.name,
        "cases": encode_cases(dsv4, dsv4_strings),
        "decodes": random_decodes(dsv4, SEED + 11),
    })

    gpt2_path = OUT / "gpt2_tokenizer.json"
    gpt2 = train_gpt2_style(texts)
    gpt2.save(str(gpt2_path), pretty=False)
    gpt2_specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|im", "[NS]", "<mask>", "<sep>", "<both>", "foo",
                     "Ġzz"]
    gpt2_strings = test_strings(gpt2_specials, SEED + 20)
    gpt2_strings += ["foo", "foo bar", "xfoo", "foox", "foo_", "foo.", "éfoo", "a <mask> b", "a   <mask>", "<sep>   x",
                     "a  <both>  b", "<mask><mask>", " <sep> <sep> ", "<|im_start|>user", "<|im_end|>"]
    # Variants of the same file, given as JSON merge patches: each is applied
    # to gpt2_tokenizer.json by the C++ test too.
    variants = []
    for name, patch in [
        ("add_prefix_space", {"pre_tokenizer": {"add_prefix_space": True}}),
        # Words that are vocabulary entries but that the merges never build:
        # ignore_merges emits them whole.
        ("ignore_merges", {"model": {"ignore_merges": True, "vocab": {"xylophone": 5000, "Ġxylophone": 5001}}}),
    ]:
        variant = Tokenizer.from_str(json.dumps(merge_patch(json.loads(gpt2.to_str()), patch)))
        texts = gpt2_strings[::5] + ["xylophone", " xylophone", "a xylophone b", "xylophones", "Xylophone"]
        variants.append({"name": name, "patch": patch,
                         "cases": [{"text": t, "ids": variant.encode(t, add_special_tokens=False).ids}
                                   for t in texts]})
    write_json(OUT / "gpt2_cases.json", {
        "tokenizer": gpt2_path.name,
        "cases": encode_cases(gpt2, gpt2_strings),
        "decodes": random_decodes(gpt2, SEED + 21),
        "variants": variants,
    })

    # The hand-written strings, then a sample of the random ones.
    pt_strings = dsv4_strings[:75] + [t for t in dsv4_strings[75::6] if len(t) < 120][:60]
    write_json(OUT / "pre_tokenizer_cases.json", pre_tokenizer_cases(pt_strings))

    total = sum(p.stat().st_size for p in OUT.iterdir())
    print(f"tokenizer fixtures: {len(dsv4_strings)} + {len(gpt2_strings)} strings, "
          f"dsv4 vocab {dsv4.get_vocab_size()}, gpt2 vocab {gpt2.get_vocab_size()}, {total / 1e6:.2f} MB in {OUT}")


if __name__ == "__main__":
    main()
