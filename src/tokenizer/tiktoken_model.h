// Kimi K2's tokenizer files: a tiktoken ranking and its special tokens.
//
//   tiktoken.model         one token a line, "base64(bytes) rank", ranks 0..n-1
//   tokenizer_config.json  added_tokens_decoder: names of the special ids
//                          n..n+255, bos_token / eos_token among them
//
// moonshotai/Kimi-K2-Instruct's tokenization_kimi.py (the reference; read,
// not copied) builds a tiktoken.Encoding from these with the pattern below
// and 256 special ids after the ranks, each named by added_tokens_decoder or
// "<|reserved_token_{id}|>". Its encode() first cuts the text into chunks of
// 400,000 characters and cuts runs of more than 25,000 whitespace or
// non-whitespace characters (Python's str.isspace), then lets tiktoken
// encode each cut with every special allowed (or none).
// Tokenizer::from_tiktoken (tokenizer.h) puts these together.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tokenizer/added_tokens.h"

namespace nibble {

// tokenization_kimi.py's pat_str: Han runs apart, then o200k's case-split
// letter runs with Han taken out of their classes ('&&' intersections),
// digits in threes, symbol runs, newlines, whitespace.
inline constexpr std::string_view kKimiPattern =
    R"([\p{Han}]+)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3})"
    R"(| ?[^\s\p{L}\p{N}]+[\r\n]*)"
    R"(|\s*[\r\n]+)"
    R"(|\s+(?!\S))"
    R"(|\s+)";

inline constexpr size_t kKimiReservedSpecials = 256;  // num_reserved_special_tokens
inline constexpr size_t kKimiChunkChars = 400'000;    // TIKTOKEN_MAX_ENCODE_CHARS
inline constexpr size_t kKimiMaxRunChars = 25'000;    // MAX_NO_WHITESPACES_CHARS

// The tokens of a tiktoken.model text, index = rank. Throws nibble::Error
// naming `name` and the line for a line that is not "base64 rank", corrupt
// base64, a rank that repeats or leaves a gap, or a token that repeats.
// Empty lines are skipped (tiktoken's loader does the same).
std::vector<std::string> read_tiktoken_ranks(std::string_view text, const std::string& name);

// The special tokens n_base .. n_base+255 named by a tokenizer_config.json
// (parsed, `where` its path). Names come from added_tokens_decoder; the rest
// are "<|reserved_token_{id}|>". Throws when added_tokens_decoder is missing,
// names an id outside that range or a name twice, or when bos_token /
// eos_token (when given) are not among the specials.
std::vector<AddedToken> read_kimi_specials(const nlohmann::json& config, size_t n_base, const std::string& where);

// The cuts Kimi's encode() makes before tiktoken runs (valid UTF-8 in, views
// into it out, covering it in order).
std::vector<std::string_view> kimi_encode_cuts(std::string_view text);

}  // namespace nibble
