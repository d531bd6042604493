#include "support/attention_layer.h"

#include <vector>

#include "kernels/random_weights.h"

namespace nibble::test {

namespace {

std::vector<float> randn(int64_t n, uint64_t seed, float sd) {
  std::vector<float> v(static_cast<size_t>(n));
  random_normal(v.data(), n, seed, sd);
  return v;
}

CompressorWeights compressor(int64_t ratio, int64_t dim, bool overlap, uint64_t seed) {
  CompressorWeights c;
  c.ratio = ratio;
  c.dim = dim;
  c.overlap = overlap;
  c.ape = randn(ratio * c.width(), seed, 1.0f);
  c.norm = randn(dim, seed + 1, 0.5f);
  return c;
}

}  // namespace

AttentionWeights attention_layer(AttnKind kind, int64_t ratio, int64_t dim, int64_t heads, uint64_t seed) {
  AttentionWeights w;
  w.kind = kind;
  w.sink = randn(heads, seed, 1.0f);
  if (kind == AttnKind::sliding) return w;
  w.compressor = compressor(ratio, dim, kind == AttnKind::csa, seed + 10);
  if (kind == AttnKind::csa) {
    IndexerWeights iw;
    iw.heads = 2;
    iw.dim = 8;
    iw.topk = 3;
    iw.compressor = compressor(ratio, 8, true, seed + 20);
    w.indexer = iw;
  }
  return w;
}

}  // namespace nibble::test
