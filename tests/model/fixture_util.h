// Shared helpers of the model tests: the DeepSeek-V4 fixtures written by
// tools/gen_dsv4_fixtures.py (tiny checkpoints + Hugging Face logits), the
// MTP oracles' files.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/registry.h"
#include "support/source_dir.h"

namespace nibble::test {

inline std::string fixture_dir(const std::string& name) {
  return source_dir() + "/tests/fixtures/dsv4/" + name;
}

inline const std::vector<std::string>& dsv4_fixtures() {
  static const std::vector<std::string> names = {"flash_tiny_stock", "flash_tiny_nvfp4", "hf_tiny_fp8experts"};
  return names;
}

struct ExpectedSequence {
  std::vector<int32_t> tokens;
  std::vector<float> logits;  // [n_tokens][vocab]
};

struct Expected {
  int64_t vocab = 0;
  std::vector<ExpectedSequence> sequences;
};

inline Expected load_expected(const std::string& name) {
  const std::string dir = fixture_dir(name) + "/expected/";
  std::ifstream mf(dir + "manifest.json");
  nlohmann::json m = nlohmann::json::parse(mf);
  Expected e;
  e.vocab = m.at("vocab_size").get<int64_t>();
  for (const auto& s : m.at("sequences")) {
    ExpectedSequence seq;
    for (const auto& t : s.at("tokens")) seq.tokens.push_back(t.get<int32_t>());
    seq.logits.resize(seq.tokens.size() * size_t(e.vocab));
    std::ifstream lf(dir + s.at("logits").get<std::string>(), std::ios::binary);
    lf.read(reinterpret_cast<char*>(seq.logits.data()), std::streamsize(seq.logits.size() * 4));
    if (!lf) throw std::runtime_error("short logits file for " + name);
    e.sequences.push_back(std::move(seq));
  }
  return e;
}

inline std::vector<float> read_f32(const std::string& path, size_t n) {
  std::vector<float> v(n);
  std::ifstream f(path, std::ios::binary);
  f.read(reinterpret_cast<char*>(v.data()), std::streamsize(n * 4));
  if (!f) throw std::runtime_error("short file " + path);
  return v;
}

// An MTP draft layer's oracle (expected/mtp/ of tools/gen_dsv4_mtp_fixtures.py
// and of tools/gen_dsv3_fixtures.py): per sequence the draft logits of rows
// 0 .. n-2 (row r: the main hidden of r and token r + 1), and chains of drafts
// after a prefix of P tokens (draft 1: hidden of P - 1, token P; draft j + 1:
// draft j's own output and its argmax).
struct MtpOracle {
  int64_t vocab = 0;
  struct Seq {
    std::vector<int32_t> tokens;
    std::vector<float> logits;  // [n - 1][vocab]
  };
  struct Chain {
    int64_t sequence = 0, prefix = 0;
    std::vector<int32_t> drafts;
    std::vector<float> logits;  // [k][vocab]
  };
  std::vector<Seq> seqs;
  std::vector<Chain> chains;
};

inline MtpOracle load_mtp_oracle(const std::string& dir) {
  std::ifstream mf(dir + "manifest.json");
  nlohmann::json m = nlohmann::json::parse(mf);
  MtpOracle o;
  o.vocab = m.at("vocab_size").get<int64_t>();
  for (const auto& s : m.at("sequences")) {
    MtpOracle::Seq q;
    for (const auto& t : s.at("tokens")) q.tokens.push_back(t.get<int32_t>());
    q.logits = read_f32(dir + s.at("logits").get<std::string>(), (q.tokens.size() - 1) * size_t(o.vocab));
    o.seqs.push_back(std::move(q));
  }
  for (const auto& c : m.at("chains")) {
    MtpOracle::Chain q;
    q.sequence = c.at("sequence").get<int64_t>();
    q.prefix = c.at("prefix").get<int64_t>();
    for (const auto& d : c.at("drafts")) q.drafts.push_back(d.get<int32_t>());
    q.logits = read_f32(dir + c.at("logits").get<std::string>(), q.drafts.size() * size_t(o.vocab));
    o.chains.push_back(std::move(q));
  }
  return o;
}

// Loads with the scalar reference kernels and a fixed bandwidth (no probe).
inline LoadOptions test_load_options(const std::string& backend = "cpu_ref") {
  LoadOptions o;
  o.threads = 2;
  o.bandwidth_gbps = 10.0;
  o.plan.linear_backend = backend;
  o.plan.moe_backend = backend;
  return o;
}

struct Comparison {
  double max_err = 0;        // max over positions of max|ours - ref| / max|ref| (per position)
  int64_t worst_position = -1;
  int64_t argmax_mismatches = 0;  // where the ref top-2 gap exceeds the tolerance
};

// Per position: max|err| relative to max|ref logit| of that position.
inline Comparison compare_logits(const float* ours, const float* ref, int64_t n, int64_t vocab, double rel_tol) {
  Comparison c;
  for (int64_t t = 0; t < n; ++t) {
    const float* a = ours + t * vocab;
    const float* b = ref + t * vocab;
    double scale = 0, err = 0;
    int64_t ia = 0, ib = 0;
    float top1 = -1e30f, top2 = -1e30f;
    for (int64_t v = 0; v < vocab; ++v) {
      scale = std::max(scale, double(std::fabs(b[v])));
      err = std::max(err, double(std::fabs(a[v] - b[v])));
      if (a[v] > a[ia]) ia = v;
      if (b[v] > b[ib]) ib = v;
      if (b[v] > top1) { top2 = top1; top1 = b[v]; }
      else if (b[v] > top2) top2 = b[v];
    }
    const double rel = err / std::max(scale, 1e-30);
    if (rel > c.max_err) {
      c.max_err = rel;
      c.worst_position = t;
    }
    if (double(top1 - top2) > rel_tol * scale && ia != ib) c.argmax_mismatches += 1;
  }
  return c;
}

// Sequence `index` of a fixture fed from position 0 of a fresh state: every
// position's logits against the oracle's `expected` [n][vocab], within tol
// of that position's largest |logit| and with the same argmax wherever the
// oracle decides it (compare_logits). `label` (fixture and kernel) names the
// run in the printed line and in the failures.
inline void expect_sequence_matches(const Model& model, const std::vector<int32_t>& tokens, const float* expected,
                                    int64_t vocab, double tol, const std::string& label, size_t index) {
  const int64_t n = int64_t(tokens.size());
  std::vector<float> logits(size_t(n * vocab));
  auto st = model.new_state();
  model.forward(*st, tokens, logits.data(), /*all_logits=*/true);
  EXPECT_EQ(st->position(), n) << label << " sequence " << index;
  const Comparison c = compare_logits(logits.data(), expected, n, vocab, tol);
  std::printf("[ %s ] sequence %zu (%lld tokens): max rel err %.3g at position %lld\n", label.c_str(), index,
              (long long)n, c.max_err, (long long)c.worst_position);
  EXPECT_LE(c.max_err, tol) << label << " sequence " << index << " worst position " << c.worst_position;
  EXPECT_EQ(c.argmax_mismatches, 0) << label << " sequence " << index;
}

}  // namespace nibble::test
