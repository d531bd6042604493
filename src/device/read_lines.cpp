// The read loop of both bandwidth probes (measure_read_bandwidth_gbps and
// bench's paired probe): a thread's range read as 8 interleaved sequential
// streams, each prefetched 1 KB ahead like the kernels' weight streams.
//
// Why 8 streams: one stream per thread is not the machine's limit. On a
// 2-core Sapphire Rapids guest one stream per thread read 17.6-19.8 GB/s
// (1 KB prefetch) while the BF16 GEMV, which reads several rows at once,
// streamed 26 GB/s: every ratio to the probe was overstated by ~1.4x.
// Streams per thread (2 threads, 256 MB slices of 2 GB, best of 8, three
// runs; bench/RESULTS.md): 1: 17.6-19.8, 2: 21.5-24.2,
// 4: 24.5-25.1, 8: 26.1-26.9, 16: 24.4-24.6 GB/s. 4 KB ahead was no better.
#include <cstdint>
#include <cstring>

#include "device/device.h"

namespace nibble {

namespace {

constexpr int kStreams = 8;
constexpr size_t kAhead = 1024;

inline uint64_t xor_line(const uint8_t* q) {
  uint64_t v[8];
  std::memcpy(v, q, 64);
  return v[0] ^ v[1] ^ v[2] ^ v[3] ^ v[4] ^ v[5] ^ v[6] ^ v[7];
}

}  // namespace

uint64_t read_lines(const uint8_t* p, size_t bytes) {
  const size_t lines = bytes / 64, per = lines / kStreams;
  uint64_t a[kStreams] = {};
  for (size_t l = 0; l < per; ++l)
    for (int s = 0; s < kStreams; ++s) {
      const uint8_t* q = p + (size_t(s) * per + l) * 64;
      __builtin_prefetch(q + kAhead);
      a[s] ^= xor_line(q);
    }
  uint64_t out = 0;
  for (int s = 0; s < kStreams; ++s) out ^= a[s];
  for (size_t l = per * kStreams; l < lines; ++l) out ^= xor_line(p + l * 64);  // the last few lines
  for (size_t i = lines * 64; i < bytes; ++i) out ^= p[i];
  return out;
}

}  // namespace nibble
