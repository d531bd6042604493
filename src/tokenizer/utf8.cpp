#include "tokenizer/utf8.h"

namespace nibble {
namespace {

// What the bytes at s[i] are: a complete sequence of `length` bytes, an
// ill-formed maximal subpart of `length` bytes (>= 1), or the valid start of
// a sequence that the end of s cuts off (`length` bytes present).
enum class Scan { Complete, Invalid, Truncated };

struct ScanResult {
  Scan kind;
  size_t length;
};

// Unicode Table 3-7 (well-formed UTF-8): the lead byte fixes the sequence
// length and the allowed range of the second byte; later bytes are 80..BF.
ScanResult scan(std::string_view s, size_t i) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  if (b0 < 0x80) return {Scan::Complete, 1};
  size_t len = 0;
  uint8_t lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
  } else if (b0 == 0xE0) {
    len = 3, lo = 0xA0;
  } else if ((b0 >= 0xE1 && b0 <= 0xEC) || b0 == 0xEE || b0 == 0xEF) {
    len = 3;
  } else if (b0 == 0xED) {
    len = 3, hi = 0x9F;  // excludes the surrogates D800..DFFF
  } else if (b0 == 0xF0) {
    len = 4, lo = 0x90;
  } else if (b0 >= 0xF1 && b0 <= 0xF3) {
    len = 4;
  } else if (b0 == 0xF4) {
    len = 4, hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return {Scan::Invalid, 1};  // 80..C1 or F5..FF can never start a character
  }
  for (size_t k = 1; k < len; ++k) {
    if (i + k >= s.size()) return {Scan::Truncated, k};
    const auto b = static_cast<uint8_t>(s[i + k]);
    const uint8_t l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (b < l || b > h) return {Scan::Invalid, k};  // the valid prefix is the maximal subpart
  }
  return {Scan::Complete, len};
}

}  // namespace

size_t utf8_sequence_length(std::string_view s, size_t i) {
  const ScanResult r = scan(s, i);
  return r.kind == Scan::Complete ? r.length : 0;
}

size_t utf8_first_invalid(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    // ASCII fast path: most text is mostly ASCII.
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const ScanResult r = scan(s, i);
    if (r.kind != Scan::Complete) return i;
    i += r.length;
  }
  return s.size();
}

size_t utf8_lossy_append(std::string_view bytes, std::string& out, bool final) {
  size_t i = 0, run = 0;  // [run, i) is valid text not yet copied
  while (i < bytes.size()) {
    if (static_cast<uint8_t>(bytes[i]) < 0x80) {
      ++i;
      continue;
    }
    const ScanResult r = scan(bytes, i);
    if (r.kind == Scan::Complete) {
      i += r.length;
      continue;
    }
    out.append(bytes.substr(run, i - run));
    if (r.kind == Scan::Truncated && !final) return i;  // wait for the rest
    out.append(kReplacementChar);
    i += r.length;
    run = i;
  }
  out.append(bytes.substr(run, i - run));
  return i;
}

uint32_t utf8_decode_at(std::string_view s, size_t i, size_t n) {
  const auto b = [&](size_t k) { return static_cast<uint32_t>(static_cast<uint8_t>(s[i + k])); };
  switch (n) {
    case 1: return b(0);
    case 2: return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
    case 3: return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    default: return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
  }
}

void utf8_append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace nibble
