#include "kernels/token_draw.h"

#include <algorithm>
#include <bit>
#include <cmath>

namespace nibble {

namespace {

// Stable LSD radix sort of 64-bit keys by their upper 32 bits (3 passes of 11 bits).
void radix_sort_upper32(std::vector<uint64_t>& v) {
  std::vector<uint64_t> tmp(v.size());
  for (int shift = 32; shift < 64; shift += 11) {
    const int bits = std::min(11, 64 - shift);
    const size_t buckets = size_t(1) << bits;
    const uint64_t mask = buckets - 1;
    std::vector<size_t> count(buckets + 1, 0);
    for (uint64_t x : v) ++count[((x >> shift) & mask) + 1];
    for (size_t b = 0; b < buckets; ++b) count[b + 1] += count[b];
    for (uint64_t x : v) tmp[count[(x >> shift) & mask]++] = x;
    v.swap(tmp);
  }
}

}  // namespace

int32_t argmax(const float* logits, int64_t vocab) {
  int64_t best = 0;
  for (int64_t i = 1; i < vocab; ++i)
    if (logits[i] > logits[best]) best = i;
  return int32_t(best);
}

std::vector<std::pair<int32_t, double>> token_distribution(const float* logits, int64_t vocab, float temperature,
                                                           int64_t top_k, float top_p, float min_p) {
  std::vector<std::pair<int32_t, double>> out;
  if (temperature == 0) {
    out.push_back({argmax(logits, vocab), 1.0});
    return out;
  }
  // Candidates sorted by logit, highest first (lower id first on ties). One
  // 64-bit key per token, (order-reversed logit bits << 32) | id, in id order,
  // then a stable radix sort on the upper half: the same order as a stable
  // sort by logit, ~4x faster at DeepSeek's 129k-id vocabulary (where the
  // comparison sort took ~10 ms a token).
  std::vector<uint64_t> keys(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i) {
    const float f = logits[i] == 0.0f ? 0.0f : logits[i];  // -0 ties with +0
    const uint32_t u = std::bit_cast<uint32_t>(f);
    const uint32_t ascending = (u & 0x80000000u) ? ~u : (u | 0x80000000u);  // float order as unsigned
    keys[size_t(i)] = (uint64_t(~ascending) << 32) | uint64_t(uint32_t(i));
  }
  radix_sort_upper32(keys);
  std::vector<int32_t> ids(static_cast<size_t>(vocab));
  for (size_t i = 0; i < keys.size(); ++i) ids[i] = int32_t(uint32_t(keys[i]));
  size_t keep = ids.size();
  if (top_k > 0) {
    // Like HF, ties with the k-th logit are kept too.
    size_t k = std::min<size_t>(size_t(top_k), keep);
    float kth = logits[ids[k - 1]];
    while (k < keep && logits[ids[k]] == kth) ++k;
    keep = k;
  }
  const double inv_t = 1.0 / temperature;
  const double top = double(logits[ids[0]]) * inv_t;
  std::vector<double> p(keep);
  double sum = 0;
  for (size_t i = 0; i < keep; ++i) sum += (p[i] = std::exp(double(logits[ids[i]]) * inv_t - top));
  for (auto& v : p) v /= sum;
  if (top_p < 1) {
    // Smallest prefix whose mass reaches top_p (always at least one token).
    double mass = 0;
    size_t n = 0;
    while (n < keep && mass < top_p) mass += p[n++];
    keep = std::max<size_t>(n, 1);
  }
  if (min_p > 0) {
    double floor = min_p * p[0];
    size_t n = 0;
    while (n < keep && p[n] >= floor) ++n;
    keep = std::max<size_t>(n, 1);
  }
  sum = 0;
  for (size_t i = 0; i < keep; ++i) sum += p[i];
  for (size_t i = 0; i < keep; ++i) out.push_back({ids[i], p[i] / sum});
  return out;
}

int32_t draw_token(const float* logits, int64_t vocab, const DrawParams& p) {
  if (p.vocab > 0) vocab = std::min(vocab, p.vocab);
  if (p.temperature == 0) return argmax(logits, vocab);
  const auto dist = token_distribution(logits, vocab, p.temperature, p.top_k, p.top_p, p.min_p);
  double acc = 0;
  for (const auto& [id, prob] : dist) {
    acc += prob;
    if (p.u < acc) return id;
  }
  return dist.back().first;
}

}  // namespace nibble
