// GPT-2's byte <-> character map, used by every byte-level BPE tokenizer.
//
// A byte-level vocabulary stores each token as text in which every byte is
// replaced by a printable stand-in character: bytes that are already
// printable Latin-1 ('!'..'~', '¡'..'¬', '®'..'ÿ') stand for themselves, the
// other 68 bytes map in order to U+0100..U+0143 (so the space 0x20 becomes
// 'Ġ' U+0120 and '\n' becomes 'Ċ' U+010A). nibble works on the raw bytes
// internally and only uses this map to read the vocabulary and to decode.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace nibble {

class ByteLevelMap {
 public:
  static const ByteLevelMap& get();

  // UTF-8 of the stand-in character for byte b ("Ġ" for 0x20).
  const std::string& char_of(uint8_t b) const { return char_of_[b]; }

  // The byte a stand-in code point represents, or -1 if cp is no stand-in.
  int byte_of(uint32_t cp) const { return cp < byte_of_.size() ? byte_of_[cp] : -1; }

  // Maps a vocabulary string back to its bytes. Returns false (and leaves
  // out unspecified) when some character is not a stand-in; Hugging Face's
  // ByteLevel decoder then uses the string's own UTF-8 bytes instead.
  bool to_bytes(std::string_view text, std::string& out) const;

  // The vocabulary form of raw bytes ("Ġhello" for " hello").
  std::string to_chars(std::string_view bytes) const;

 private:
  ByteLevelMap();
  std::array<std::string, 256> char_of_;
  std::array<int16_t, 324> byte_of_;  // stand-ins are all below U+0144
};

}  // namespace nibble
