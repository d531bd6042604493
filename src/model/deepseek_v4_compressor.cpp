#include "model/deepseek_v4_compressor.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "util/error.h"

namespace nibble {

namespace {

// Pools the closed window held in st.open_* (+ st.prev_* for CSA) into one
// entry [c] of window `w`, then norms and ropes it.
void emit_entry(const CompressorWeights& w, const RopeTable& rope, double rms_eps, CompressorState& st,
                int64_t window) {
  const int64_t m = w.ratio, c = w.dim, width = w.width();
  std::vector<float> entry(static_cast<size_t>(c));
  // Slots per channel: CSA = [Ca of the previous window (if any) | Cb of this one]; HCA = this window.
  const int64_t n_prev = w.overlap && st.has_prev ? m : 0;
  const int64_t cur_off = w.overlap ? c : 0;  // Cb lives in the second half
  std::vector<float> score(size_t(n_prev + m));
  for (int64_t ch = 0; ch < c; ++ch) {
    for (int64_t j = 0; j < n_prev; ++j) score[size_t(j)] = st.prev_score[size_t(j * c + ch)];
    for (int64_t j = 0; j < m; ++j) score[size_t(n_prev + j)] = st.open_score[size_t(j * width + cur_off + ch)];
    softmax_inplace(score.data(), n_prev + m);
    float acc = 0;
    for (int64_t j = 0; j < n_prev; ++j) acc += st.prev_kv[size_t(j * c + ch)] * score[size_t(j)];
    for (int64_t j = 0; j < m; ++j) acc += st.open_kv[size_t(j * width + cur_off + ch)] * score[size_t(n_prev + j)];
    entry[size_t(ch)] = acc;
  }
  rms_norm(entry.data(), 1, c, w.norm.data(), rms_eps, entry.data());
  rope.apply(entry.data(), 1, c, window * m, /*inverse=*/false);
  st.entries.insert(st.entries.end(), entry.begin(), entry.end());
  st.n_entries += 1;

  if (w.overlap) {  // the next entry pools this window's Ca half
    st.prev_kv.resize(size_t(m * c));
    st.prev_score.resize(size_t(m * c));
    for (int64_t j = 0; j < m; ++j)
      for (int64_t ch = 0; ch < c; ++ch) {
        st.prev_kv[size_t(j * c + ch)] = st.open_kv[size_t(j * width + ch)];
        st.prev_score[size_t(j * c + ch)] = st.open_score[size_t(j * width + ch)];
      }
    st.has_prev = true;
  }
  st.open_rows = 0;
}

}  // namespace

void compressor_forward(const CompressorWeights& w, const RopeTable& rope, double rms_eps, const float* h, int64_t n,
                        int64_t p0, CompressorState& st, ThreadPool* pool) {
  const int64_t m = w.ratio, width = w.width();
  if (p0 != st.n_entries * m + st.open_rows)
    fail("compressor state is at position ", st.n_entries * m + st.open_rows, " but was fed position ", p0);
  if (n <= 0) return;
  std::vector<float> kv(size_t(n * width)), score(size_t(n * width));
  w.wkv.run(h, n, kv.data(), pool);
  w.wgate.run(h, n, score.data(), pool);
  st.open_kv.resize(size_t(m * width));
  st.open_score.resize(size_t(m * width));
  for (int64_t t = 0; t < n; ++t) {
    const int64_t slot = st.open_rows;  // == (p0 + t) % m
    const float* ape = w.ape.data() + slot * width;
    for (int64_t i = 0; i < width; ++i) {
      st.open_kv[size_t(slot * width + i)] = kv[size_t(t * width + i)];
      st.open_score[size_t(slot * width + i)] = score[size_t(t * width + i)] + ape[i];
    }
    st.open_rows += 1;
    if (st.open_rows == m) emit_entry(w, rope, rms_eps, st, st.n_entries);
  }
}

}  // namespace nibble
