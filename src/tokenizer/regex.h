// A compiled tokenizer regex: PCRE2 with UTF and Unicode properties (UCP),
// JIT-compiled when the library supports it.
//
// Hugging Face runs its Split patterns with Oniguruma; DeepSeek's needs
// lookahead and \p{..} classes, which PCRE2 provides with the same
// backtracking, leftmost-first semantics. In UCP mode \s, \w and \d follow
// Unicode properties like Oniguruma's.
//
// Thread safety: a Regex is immutable after construction and can be used
// from many threads; match scratch memory is kept per thread.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace nibble {

struct Span {
  size_t begin;  // byte offsets into the searched text
  size_t end;
};

// Rewrites the escapes whose meaning differs between Oniguruma (which
// Hugging Face uses) and PCRE2 into explicit Unicode properties. Exposed
// for tests.
std::string onig_to_pcre2(std::string_view pattern);

// Rewrites a pattern in Rust's regex syntax (tiktoken patterns run on
// fancy-regex) into PCRE2 with the same meaning:
//   [A&&[^B]]  class intersection, which PCRE2 10.42 lacks, becomes
//              (?:(?=[^B])[A]): one character of A that a lookahead found
//              to be in every other operand (Kimi K2 takes Han out of its
//              letter classes this way). A negated class holding an
//              intersection is refused.
//   \p{Han}    a script name means the Script property in Rust, but
//              Script_Extensions in PCRE2 10.40+ (U+3001 、 is Han there),
//              so it becomes \p{sc:Han}. Names of one or two letters
//              (general categories) and names with '=' or ':' are kept.
// `where` names the pattern in errors. Everything else is copied as is.
std::string rust_regex_to_pcre2(std::string_view pattern, const std::string& where);

class Regex {
 public:
  // `literal` compiles the pattern as a plain string (Split's {"String": ..}).
  // `where` names the file and field for error messages.
  Regex(std::string_view pattern, bool literal, std::string where);
  ~Regex();
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;

  // Earliest match at or after byte `from`; false when there is none.
  // `text` must be valid UTF-8 and `from` on a character boundary.
  bool search(std::string_view text, size_t from, Span& match) const;

  // Appends every match, left to right and non-overlapping. Follows the
  // find_iter rules Hugging Face relies on: after a match the search resumes
  // at its end, and an empty match exactly where the previous match ended is
  // skipped (the search moves on by one character).
  void find_all(std::string_view text, std::vector<Span>& out) const;

  const std::string& where() const { return where_; }

 private:
  struct Code;
  std::unique_ptr<Code> code_;
  std::string where_;
};

}  // namespace nibble
