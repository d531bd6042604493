// UTF-8 helpers for the tokenizer: validation of input text, and lossy
// conversion of decoded token bytes back to text.
//
// Byte-level BPE tokens are arbitrary byte strings, so a decoded id sequence
// can hold a multi-byte character split across tokens, or (for ids a model
// should not emit) bytes that never form valid UTF-8. Hugging Face turns such
// bytes into U+FFFD the way Rust's String::from_utf8_lossy does: each
// "maximal subpart" of an ill-formed sequence (Unicode 15, §3.9, Table 3-8)
// becomes one U+FFFD. utf8_lossy_append() reproduces that exactly, and can
// stop before an incomplete sequence at the end of the input so a stream
// decoder can wait for the rest of the character.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace nibble {

inline constexpr char kReplacementChar[] = "\xEF\xBF\xBD";  // U+FFFD in UTF-8

// Length of the well-formed UTF-8 sequence starting at s[i], or 0 when the
// bytes at i are not a complete well-formed sequence (ill-formed, or cut off
// by the end of s).
size_t utf8_sequence_length(std::string_view s, size_t i);

// Byte offset of the first ill-formed byte of s, or s.size() when s is valid.
size_t utf8_first_invalid(std::string_view s);

// Appends the text of `bytes` to out, replacing each maximal ill-formed
// subpart by U+FFFD. When `final` is false, an incomplete but so-far valid
// sequence at the very end is not converted; the return value is the number
// of bytes consumed (bytes.size() minus that held-back tail, at most 3).
size_t utf8_lossy_append(std::string_view bytes, std::string& out, bool final);

// Decodes the code point at s[i] (which must start a well-formed sequence of
// length n = utf8_sequence_length(s, i) > 0).
uint32_t utf8_decode_at(std::string_view s, size_t i, size_t n);

// Appends the UTF-8 encoding of a code point (< 0x110000, not a surrogate).
void utf8_append(std::string& out, uint32_t cp);

}  // namespace nibble
