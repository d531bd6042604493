#!/usr/bin/env python3
"""Expected sampling distributions from Hugging Face transformers' own logits
warpers (TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper,
MinPLogitsWarper, applied in that order), for nibble's sampler tests.

Writes tests/fixtures/sampler/cases.json: a list of
{logits: [...], temperature, top_k, top_p, min_p, probs: [...]} where probs is
the full-vocabulary distribution (0 for filtered tokens).
"""
import json
import pathlib

import numpy as np
import torch
from transformers.generation.logits_process import (
    MinPLogitsWarper,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests/fixtures/sampler/cases.json"


def warped_probs(logits, temperature, top_k, top_p, min_p):
    scores = torch.tensor([logits], dtype=torch.float64)
    ids = torch.zeros((1, 1), dtype=torch.long)
    if temperature != 1.0:
        scores = TemperatureLogitsWarper(temperature)(ids, scores)
    if top_k > 0:
        scores = TopKLogitsWarper(top_k)(ids, scores)
    if top_p < 1.0:
        scores = TopPLogitsWarper(top_p)(ids, scores)
    if min_p > 0.0:
        scores = MinPLogitsWarper(min_p)(ids, scores)
    return torch.softmax(scores, dim=-1)[0].tolist()


def main():
    rng = np.random.default_rng(1234)
    cases = []
    settings = [
        (1.0, 0, 1.0, 0.0), (0.7, 0, 1.0, 0.0), (1.3, 5, 1.0, 0.0), (1.0, 0, 0.9, 0.0),
        (0.8, 0, 0.5, 0.0), (1.0, 0, 1.0, 0.1), (0.6, 10, 0.95, 0.05), (1.0, 1, 1.0, 0.0),
        (2.0, 0, 0.3, 0.0), (1.0, 3, 0.8, 0.2),
    ]
    for vocab in (7, 33, 100):
        for (t, k, p, m) in settings:
            logits = (rng.standard_normal(vocab) * rng.uniform(0.5, 4.0)).astype(np.float32)
            probs = warped_probs(logits.astype(np.float64).tolist(), t, k, p, m)
            cases.append({"logits": [float(x) for x in logits], "temperature": t, "top_k": k,
                          "top_p": p, "min_p": m, "probs": probs})
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(cases))
    print(f"wrote {len(cases)} cases to {OUT}")


if __name__ == "__main__":
    main()
