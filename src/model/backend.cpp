#include "model/backend.h"

#include <algorithm>

namespace nibble {

void check_rows_out(Tensor x, std::span<float* const> out) {
  if (int64_t(out.size()) != x.rows) fail("to_host_rows: ", x.rows, " rows but ", out.size(), " destinations");
  for (float* p : out)
    if (!p) fail("to_host_rows: a row's destination is null");
}

void Backend::to_host_rows(Tensor x, std::span<float* const> out) {
  check_rows_out(x, out);
  std::vector<float> staged(size_t(x.rows * x.cols));
  to_host(x, staged.data());
  for (int64_t r = 0; r < x.rows; ++r)
    std::copy(staged.begin() + r * x.cols, staged.begin() + (r + 1) * x.cols, out[size_t(r)]);
}

void Backend::draw_tokens(Tensor logits, std::span<const DrawParams> params, std::span<int32_t> ids) {
  if (int64_t(params.size()) != logits.rows || int64_t(ids.size()) != logits.rows)
    fail("draw_tokens: ", params.size(), " settings and ", ids.size(), " ids for ", logits.rows, " rows of logits");
  std::vector<float> host(size_t(logits.rows * logits.cols));
  to_host(logits, host.data());
  for (int64_t r = 0; r < logits.rows; ++r)
    ids[size_t(r)] = draw_token(host.data() + r * logits.cols, logits.cols, params[size_t(r)]);
}

}  // namespace nibble
