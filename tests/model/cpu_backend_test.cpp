// The CPU backend's transfers to the caller (model/backend.h): to_host_rows
// hands each row of a Tensor to its own buffer, both as the CPU backend does
// it (a copy per row) and as Backend's default does for a device backend
// (one to_host into host memory, then the rows scattered), and refuses a
// destination list that does not match the rows.
#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

#include "model/cpu_backend.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace nibble {
namespace {

TEST(CpuBackend, ToHostRowsScattersEachRowToItsBuffer) {
  ThreadPool pool(1);
  CpuBackend be(&pool, nullptr);
  be.begin_step(false);
  const int64_t rows = 3, cols = 5;
  Tensor x = be.alloc(rows, cols);
  std::iota(x.data, x.data + rows * cols, 1.0f);
  for (bool default_path : {false, true}) {
    std::vector<std::vector<float>> bufs(size_t(rows), std::vector<float>(size_t(cols), -1.0f));
    // Out of order, as a step's sequences may want them.
    std::vector<float*> out = {bufs[2].data(), bufs[0].data(), bufs[1].data()};
    if (default_path) be.Backend::to_host_rows(x, out);
    else be.to_host_rows(x, out);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        EXPECT_EQ(out[size_t(r)][c], float(r * cols + c + 1)) << "row " << r << " default path " << default_path;
  }
}

TEST(CpuBackend, ToHostRowsRefusesMismatchedDestinations) {
  ThreadPool pool(1);
  CpuBackend be(&pool, nullptr);
  be.begin_step(false);
  Tensor x = be.alloc(2, 4);
  std::vector<float> a(4);
  std::vector<float*> one = {a.data()}, with_null = {a.data(), nullptr};
  for (bool default_path : {false, true})
    for (const std::vector<float*>* out : {&one, &with_null}) {
      try {
        if (default_path) be.Backend::to_host_rows(x, *out);
        else be.to_host_rows(x, *out);
        FAIL() << "accepted " << out->size() << " destinations";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("to_host_rows"), std::string::npos) << e.what();
      }
    }
}

}  // namespace
}  // namespace nibble
