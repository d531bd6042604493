// The read loop of the bandwidth probe, in AVX2: four independent 256-bit
// load streams so the core keeps enough loads in flight to saturate DRAM.
// Plain C interface only (see the ISA-file rule in CMakeLists.txt).
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

namespace nibble {

uint64_t read_sum_avx2(const uint8_t* p, size_t bytes) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 128 <= bytes; i += 128) {
    a0 = _mm256_xor_si256(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_xor_si256(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    a2 = _mm256_xor_si256(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    a3 = _mm256_xor_si256(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  __m256i a = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
  uint64_t out = uint64_t(_mm256_extract_epi64(a, 0)) ^ uint64_t(_mm256_extract_epi64(a, 1)) ^
                 uint64_t(_mm256_extract_epi64(a, 2)) ^ uint64_t(_mm256_extract_epi64(a, 3));
  for (; i < bytes; ++i) out ^= p[i];
  return out;
}

}  // namespace nibble
