// Memory read bandwidth, measured the way performance.md asks: a read-only
// pass over a buffer far larger than the last-level cache, all threads, best
// of a few passes. Decode speed is judged as a ratio to this number.
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "device/device.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace nibble {

namespace {

struct FreeDeleter {
  void operator()(uint8_t* p) const { std::free(p); }
};

}  // namespace

double measure_read_bandwidth_gbps(int threads, size_t bytes, int repeats) {
  ThreadPool pool(threads);
  bytes = (bytes / 4096) * 4096;
  if (bytes == 0) fail("bandwidth probe: buffer too small");
  std::unique_ptr<uint8_t, FreeDeleter> buf(static_cast<uint8_t*>(std::aligned_alloc(4096, bytes)));
  if (!buf) fail("bandwidth probe: cannot allocate ", bytes, " bytes");
  uint8_t* p = buf.get();
  const int64_t pages = int64_t(bytes / 4096);
  // First touch from the threads that will read, with non-constant data.
  pool.parallel_for(pages, [&](int64_t b, int64_t e, int) {
    for (int64_t pg = b; pg < e; ++pg)
      for (size_t i = 0; i < 4096; i += 8) {
        uint64_t v = uint64_t(pg) * 0x9E3779B97F4A7C15ull + i;
        std::memcpy(p + pg * 4096 + i, &v, 8);
      }
  });
  std::vector<uint64_t> sink(size_t(pool.size()), 0);
  double best = 0;
  for (int r = 0; r < repeats + 1; ++r) {  // the first pass is a warm-up
    auto t0 = std::chrono::steady_clock::now();
    pool.parallel_for(pages, [&](int64_t b, int64_t e, int t) {
      const uint8_t* start = p + b * 4096;
      size_t len = size_t(e - b) * 4096;
      sink[size_t(t)] ^= read_lines(start, len);
    });
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0 && s > 0) best = std::max(best, double(bytes) / s / 1e9);
  }
  volatile uint64_t keep = 0;
  for (uint64_t v : sink) keep = keep ^ v;
  (void)keep;
  return best;
}

}  // namespace nibble
