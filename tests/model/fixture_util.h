// Shared helpers of the model tests: the DeepSeek-V4 fixtures written by
// tools/gen_dsv4_fixtures.py (tiny checkpoints + Hugging Face logits).
#pragma once

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/registry.h"

namespace nibble::test {

inline std::string fixture_dir(const std::string& name) {
  return std::string(NIBBLE_SOURCE_DIR) + "/tests/fixtures/dsv4/" + name;
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

}  // namespace nibble::test
