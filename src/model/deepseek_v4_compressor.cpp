#include "model/deepseek_v4_compressor.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "util/error.h"

namespace nibble {

namespace {

// The first position whose row the window holding `p` (CSA: and the window
// before it, whose Ca half that window's entry pools) needs.
int64_t rows_needed_from(const CompressorWeights& w, int64_t p) {
  const int64_t window = p / w.ratio;
  return std::max<int64_t>(0, (w.overlap ? window - 1 : window) * w.ratio);
}

// Pools window `window` (its rows, and for CSA the Ca half of the window
// before it) into one entry [c], norms, ropes and appends it.
void emit_entry(const CompressorWeights& w, const RopeTable& rope, double rms_eps, CompressorState& st,
                int64_t window) {
  const int64_t m = w.ratio, c = w.dim, width = w.width();
  // Slots per channel: CSA = [Ca of the previous window (if any) | Cb of this one]; HCA = this window.
  const int64_t n_prev = w.overlap && window > 0 ? m : 0;
  const int64_t cur_off = w.overlap ? c : 0;  // Cb lives in the second half
  const int64_t cur = window * m - st.rows_from, prev = cur - m;  // row indices in the store
  if (cur - n_prev < 0) fail("compressor: window ", window, " needs rows that were dropped");
  std::vector<float> entry(static_cast<size_t>(c)), score(static_cast<size_t>(n_prev + m));
  for (int64_t ch = 0; ch < c; ++ch) {
    for (int64_t j = 0; j < n_prev; ++j) score[size_t(j)] = st.score_rows[size_t((prev + j) * width + ch)];
    for (int64_t j = 0; j < m; ++j) score[size_t(n_prev + j)] = st.score_rows[size_t((cur + j) * width + cur_off + ch)];
    softmax_inplace(score.data(), n_prev + m);
    float acc = 0;
    for (int64_t j = 0; j < n_prev; ++j) acc += st.kv_rows[size_t((prev + j) * width + ch)] * score[size_t(j)];
    for (int64_t j = 0; j < m; ++j)
      acc += st.kv_rows[size_t((cur + j) * width + cur_off + ch)] * score[size_t(n_prev + j)];
    entry[size_t(ch)] = acc;
  }
  rms_norm(entry.data(), 1, c, w.norm.data(), rms_eps, entry.data());
  rope.apply(entry.data(), 1, c, window * m, /*inverse=*/false);
  st.entries.insert(st.entries.end(), entry.begin(), entry.end());
  st.n_entries += 1;
}

}  // namespace

int64_t CompressorState::truncate_floor(const CompressorWeights& w) const {
  if (rows_from == 0) return 0;
  // The smallest p with rows_needed_from(p) >= rows_from.
  return w.overlap ? rows_from + w.ratio : rows_from;
}

void CompressorState::truncate(const CompressorWeights& w, int64_t p) {
  if (p < truncate_floor(w) || p > position)
    fail("compressor: cannot truncate to position ", p, " (holds ", truncate_floor(w), " .. ", position, ")");
  const int64_t width = w.width();
  kv_rows.resize(size_t((p - rows_from) * width));
  score_rows.resize(size_t((p - rows_from) * width));
  n_entries = p / w.ratio;
  entries.resize(size_t(n_entries * w.dim));
  position = p;
}

uint64_t CompressorState::bytes() const {
  return sizeof(float) * (kv_rows.capacity() + score_rows.capacity() + entries.capacity());
}

void compressor_append(const CompressorWeights& w, const RopeTable& rope, double rms_eps, const float* kv,
                       const float* score, int64_t n, int64_t p0, int64_t rollback, CompressorState& st) {
  const int64_t m = w.ratio, width = w.width();
  if (p0 != st.position) fail("compressor state is at position ", st.position, " but was fed position ", p0);
  if (n <= 0) return;
  for (int64_t t = 0; t < n; ++t) {
    const int64_t slot = st.position % m;
    const float* ape = w.ape.data() + slot * width;
    st.kv_rows.insert(st.kv_rows.end(), kv + t * width, kv + (t + 1) * width);
    for (int64_t i = 0; i < width; ++i) st.score_rows.push_back(score[t * width + i] + ape[i]);
    st.position += 1;
    if (st.position % m == 0) emit_entry(w, rope, rms_eps, st, st.position / m - 1);
  }
  // Drop rows no truncation within `rollback` can need, a window at a time.
  const int64_t keep_from = rows_needed_from(w, std::max<int64_t>(0, st.position - rollback));
  if (keep_from - st.rows_from >= m) {
    const int64_t drop = (keep_from - st.rows_from) / m * m;
    st.kv_rows.erase(st.kv_rows.begin(), st.kv_rows.begin() + drop * width);
    st.score_rows.erase(st.score_rows.begin(), st.score_rows.begin() + drop * width);
    st.rows_from += drop;
  }
}

}  // namespace nibble
