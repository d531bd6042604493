#include "tokenizer/byte_level.h"

#include "tokenizer/utf8.h"

namespace nibble {

const ByteLevelMap& ByteLevelMap::get() {
  static const ByteLevelMap map;
  return map;
}

ByteLevelMap::ByteLevelMap() {
  byte_of_.fill(-1);
  uint32_t next_extra = 256;  // non-printable bytes take U+0100, U+0101, ... in byte order
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    const uint32_t cp = printable ? b : next_extra++;
    char_of_[b].clear();
    utf8_append(char_of_[b], cp);
    byte_of_[cp] = static_cast<int16_t>(b);
  }
}

bool ByteLevelMap::to_bytes(std::string_view text, std::string& out) const {
  out.clear();
  size_t i = 0;
  while (i < text.size()) {
    const size_t n = utf8_sequence_length(text, i);
    if (n == 0) return false;
    const int b = byte_of(utf8_decode_at(text, i, n));
    if (b < 0) return false;
    out.push_back(static_cast<char>(b));
    i += n;
  }
  return true;
}

std::string ByteLevelMap::to_chars(std::string_view bytes) const {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += char_of_[static_cast<uint8_t>(c)];
  return out;
}

}  // namespace nibble
