// libFuzzer harness for parse_safetensors_header (opt-in build: `make fuzz`).
// Every input is tried twice:
//   1. as a whole file (8-byte length, header, data), readable to the end;
//   2. as the header JSON alone, wrapped with a correct length prefix in a
//      file that continues 1 MiB past the readable bytes (data that is never
//      read, as when only the header of a huge shard has been fetched).
// The parser may reject anything, but only with nibble::Error; any other
// exception, crash, sanitizer report or leak is a bug. Accepted headers must
// satisfy the invariants the rest of nibble relies on; they are checked here
// with abort() so that a violation is reported as a crash.
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "checkpoint/safetensors.h"
#include "util/error.h"

namespace {

void require(bool ok) {
  if (!ok) std::abort();
}

void check_one(const uint8_t* data, size_t avail, uint64_t file_size) {
  nibble::SafetensorsHeader h;
  try {
    h = nibble::parse_safetensors_header(data, avail, file_size, "fuzz.safetensors");
  } catch (const nibble::Error&) {
    return;
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | data[i];
  require(h.data_start == 8 + n && h.data_start <= avail);
  std::set<std::string> names;
  uint64_t prev_end = h.data_start;
  for (const auto& t : h.tensors) {
    require(names.insert(t.name).second);
    unsigned __int128 bytes = nibble::dtype_size(t.dtype);
    for (int64_t d : t.shape) {
      require(d >= 0);
      bytes *= uint64_t(d);
    }
    require(bytes == t.nbytes);
    require(t.offset >= h.data_start && t.offset <= file_size && t.nbytes <= file_size - t.offset);
    if (t.nbytes == 0) continue;
    require(t.offset >= prev_end);  // sorted by offset, no overlap
    prev_end = t.offset + t.nbytes;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  check_one(data, size, size);
  std::vector<uint8_t> wrapped(8 + size);
  for (int i = 0; i < 8; ++i) wrapped[i] = uint8_t(uint64_t(size) >> (8 * i));
  if (size) std::copy(data, data + size, wrapped.begin() + 8);
  check_one(wrapped.data(), wrapped.size(), wrapped.size() + (1u << 20));
  return 0;
}
