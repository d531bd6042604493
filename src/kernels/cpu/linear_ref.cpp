// The scalar reference linear op (kernels/linear.h). Each output is one f64
// sum over the row in column order, per (row, token): batch-invariant by
// construction (nothing depends on the other tokens or on the row split).
#include <vector>

#include "kernels/linear.h"
#include "runtime/thread_pool.h"

namespace nibble {

void linear_ref(const WeightView& w, const float* x, int64_t n, float* y, ThreadPool* pool) {
  auto rows_job = [&](int64_t r0, int64_t r1, int) {
    std::vector<float> row(size_t(w.cols));
    for (int64_t r = r0; r < r1; ++r) {
      dequantize_row(w, r, row.data());
      for (int64_t t = 0; t < n; ++t) {
        const float* xt = x + t * w.cols;
        double acc = 0;
        for (int64_t j = 0; j < w.cols; ++j) acc += double(row[j]) * double(xt[j]);
        y[t * w.rows + r] = float(acc);
      }
    }
  };
  if (pool) pool->parallel_for(w.rows, rows_job, 16);
  else rows_job(0, w.rows, 0);
}

}  // namespace nibble
