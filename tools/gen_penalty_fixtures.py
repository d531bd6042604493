#!/usr/bin/env python3
"""Expected logits after the repetition, presence and frequency penalties, for
nibble's sampler tests (tests/runtime/sampler_penalty_test.cpp).

Written with numpy only, implementing the published definitions exactly (no
torch was practical on the machine these fixtures were made on):

- repetition_penalty: transformers' RepetitionPenaltyLogitsProcessor
  (src/transformers/generation/logits_process.py):
      score = torch.gather(scores, 1, input_ids)
      score = torch.where(score < 0, score * penalty, score / penalty)
      scores.scatter_(1, input_ids, score)
  over input_ids = the whole sequence so far (prompt and generated tokens);
  a repeated id is penalised once (gather reads the original scores).
- presence / frequency: OpenAI's definition as vLLM applies it
  (vllm/model_executor/layers/utils.py apply_penalties), after the
  repetition penalty, over the generated tokens only:
      logits -= frequency_penalty * output_bin_counts
      logits -= presence_penalty * (output_bin_counts > 0)

Writes tests/fixtures/sampler/penalty_cases.json: a list of {logits, context,
generated, repetition_penalty, presence_penalty, frequency_penalty,
temperature, penalized, probs} where probs = softmax(penalized / temperature)
over the full vocabulary (no other filter).
"""
import json
import pathlib

import numpy as np

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests/fixtures/sampler/penalty_cases.json"


def repetition(scores, input_ids, penalty):
    out = scores.copy()
    ids = np.asarray(input_ids, dtype=np.int64)
    if ids.size:
        score = scores[ids]  # gather from the original scores
        out[ids] = np.where(score < 0, score * penalty, score / penalty)  # scatter
    return out


def presence_frequency(scores, generated, presence, frequency):
    counts = np.bincount(np.asarray(generated, dtype=np.int64), minlength=scores.size).astype(np.float64)
    return scores - frequency * counts - presence * (counts > 0)


def softmax(x):
    e = np.exp(x - x.max())
    return e / e.sum()


def main():
    rng = np.random.default_rng(2024)
    settings = [  # (repetition, presence, frequency, temperature)
        (1.3, 0.0, 0.0, 1.0), (0.7, 0.0, 0.0, 1.0), (1.0, 0.5, 0.0, 1.0), (1.0, 0.0, 0.4, 1.0),
        (1.2, 0.3, 0.2, 0.8), (2.0, -0.5, 0.1, 1.5), (1.0, 0.0, -0.3, 1.0), (1.5, 1.0, 1.0, 0.6),
    ]
    cases = []
    for vocab in (5, 17, 64):
        for rep, pres, freq, temp in settings:
            # float32 logits, as the model produces; the oracle computes in
            # float64 from them.
            logits = (rng.standard_normal(vocab) * rng.uniform(0.5, 3.0)).astype(np.float32)
            logits[rng.integers(0, vocab)] = 0.0  # a zero logit: divided and multiplied alike
            context = rng.integers(0, vocab, size=int(rng.integers(0, 6))).tolist()
            generated = rng.integers(0, vocab, size=int(rng.integers(1, 9))).tolist()
            s = logits.astype(np.float64)
            s = repetition(s, context + generated, rep)
            s = presence_frequency(s, generated, pres, freq)
            cases.append({
                "logits": [float(x) for x in logits], "context": context, "generated": generated,
                "repetition_penalty": rep, "presence_penalty": pres, "frequency_penalty": freq,
                "temperature": temp, "penalized": [float(x) for x in s],
                "probs": [float(x) for x in softmax(s / temp)],
            })
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(cases))
    print(f"wrote {len(cases)} cases to {OUT}")


if __name__ == "__main__":
    main()
