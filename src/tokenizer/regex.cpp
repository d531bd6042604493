#include "tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tokenizer/utf8.h"
#include "util/error.h"

namespace nibble {
namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  if (pcre2_get_error_message(code, buf, sizeof buf) < 0) return "PCRE2 error " + std::to_string(code);
  return reinterpret_cast<const char*>(buf);
}

// Per-thread matching memory. One ovector pair is enough: we only need the
// overall match, and PCRE2 fills what fits when a pattern has more groups.
// The JIT stack is larger than PCRE2's 32 KiB default so that long runs of
// one character class (a 1 MB line of spaces) cannot exhaust it.
struct MatchScratch {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;

  MatchScratch() {
    data = pcre2_match_data_create(1, nullptr);
    context = pcre2_match_context_create(nullptr);
    jit_stack = pcre2_jit_stack_create(64 * 1024, 8 * 1024 * 1024, nullptr);
    if (!data || !context) fail("tokenizer regex: out of memory creating PCRE2 match data");
    if (jit_stack) pcre2_jit_stack_assign(context, nullptr, jit_stack);
  }
  ~MatchScratch() {
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
  MatchScratch(const MatchScratch&) = delete;
  MatchScratch& operator=(const MatchScratch&) = delete;
};

MatchScratch& scratch() {
  thread_local MatchScratch s;
  return s;
}

}  // namespace

// Oniguruma's Unicode \w as the inside of a class. Outside a class it also
// takes the Latin-1 superscript digits and fractions (its Latin-1 ctype
// table marks them as word characters); inside a class it does not.
constexpr std::string_view kWord = R"(\p{Alphabetic}\p{M}\p{Nd}\p{Pc})";
constexpr std::string_view kWordLatin1Extra = R"(\x{B2}\x{B3}\x{B9}\x{BC}-\x{BE})";

std::string onig_to_pcre2(std::string_view pattern) {
  // Oniguruma (Ruby syntax, Unicode) and PCRE2 (UCP) disagree on a few
  // escapes; rewrite them to explicit properties so the match is the same:
  //   \s \S  Onig: White_Space. PCRE2 adds U+180E (it counts as \h there).
  //   \w \W  Onig: Alphabetic, M, Nd, Pc (plus six Latin-1 characters when
  //           outside a class). PCRE2 10.42: L, N and '_' only.
  //   \h \H  Onig: hex digit. PCRE2: horizontal space.
  // \W and \H inside a character class are left alone: a negated set
  // cannot be spelled inside a class without set subtraction.
  std::string out;
  out.reserve(pattern.size() + 16);
  bool in_class = false;
  size_t class_start = 0;  // index of the first character after '[' or '[^'
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[++i];
      switch (e) {
        case 's': out += "\\p{White_Space}"; break;
        case 'S': out += "\\P{White_Space}"; break;
        case 'w':
          out += in_class ? std::string(kWord) : "[" + std::string(kWord) + std::string(kWordLatin1Extra) + "]";
          break;
        case 'W':
          out += in_class ? std::string("\\W") : "[^" + std::string(kWord) + std::string(kWordLatin1Extra) + "]";
          break;
        case 'h': out += in_class ? "0-9a-fA-F" : "[0-9a-fA-F]"; break;
        case 'H': out += in_class ? "\\H" : "[^0-9a-fA-F]"; break;
        default:
          out += c;
          out += e;
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      class_start = i + 1;
      continue;
    }
    if (in_class && c == '[' && i + 1 < pattern.size() && pattern[i + 1] == ':') {
      // POSIX class [:alpha:] inside a set: copy through its closing ":]".
      const size_t close = pattern.find(":]", i + 2);
      if (close != std::string_view::npos) {
        out.append(pattern.substr(i, close + 2 - i));
        i = close + 1;
        continue;
      }
    }
    if (in_class && c == ']' && i != class_start) in_class = false;  // a leading ']' is literal
    out += c;
  }
  return out;
}

namespace {

// End (one past the closing ']') of the class opening at pattern[open],
// Rust syntax: escapes, nested classes, a ']' first (after '^') is literal.
// `cuts` gets the offsets of the '&&' at the class's own level.
size_t class_end(std::string_view p, size_t open, std::vector<size_t>& cuts, const std::string& where) {
  size_t i = open + 1;
  if (i < p.size() && p[i] == '^') ++i;
  if (i < p.size() && p[i] == ']') ++i;
  while (i < p.size()) {
    const char c = p[i];
    if (c == '\\') {
      i += 2;
    } else if (c == '[' && i + 1 < p.size() && p[i + 1] == ':') {
      const size_t close = p.find(":]", i + 2);  // POSIX [:alpha:]
      i = close == std::string_view::npos ? i + 1 : close + 2;
    } else if (c == '[') {
      std::vector<size_t> inner;
      i = class_end(p, i, inner, where);
    } else if (c == ']') {
      return i + 1;
    } else if (c == '&' && i + 1 < p.size() && p[i + 1] == '&') {
      cuts.push_back(i);
      i += 2;
    } else {
      ++i;
    }
  }
  fail(where, ": pattern has a '[' at offset ", open, " that is never closed");
}

// \p{Name} / \P{Name} with a script name -> \p{sc:Name}; p[i] is the
// backslash. Returns the characters consumed (0: not a property).
size_t script_property(std::string_view p, size_t i, std::string& out) {
  if (i + 2 >= p.size() || (p[i + 1] != 'p' && p[i + 1] != 'P') || p[i + 2] != '{') return 0;
  const size_t close = p.find('}', i + 3);
  if (close == std::string_view::npos) return 0;
  std::string_view name = p.substr(i + 3, close - i - 3);
  const bool negated_inside = !name.empty() && name[0] == '^';
  if (negated_inside) name.remove_prefix(1);
  const bool keep = name.size() <= 2 || name.find_first_of("=:") != std::string_view::npos;
  out += '\\';
  out += p[i + 1];
  out += '{';
  if (negated_inside) out += '^';
  if (!keep) out += "sc:";
  out.append(name);
  out += '}';
  return close + 1 - i;
}

std::string class_intersections(std::string_view p, const std::string& where) {
  std::string out;
  out.reserve(p.size() + 32);
  for (size_t i = 0; i < p.size();) {
    if (p[i] == '\\' && i + 1 < p.size()) {
      out.append(p.substr(i, 2));
      i += 2;
      continue;
    }
    if (p[i] != '[') {
      out += p[i++];
      continue;
    }
    std::vector<size_t> cuts;
    const size_t end = class_end(p, i, cuts, where);
    if (cuts.empty()) {
      out.append(p.substr(i, end - i));
      i = end;
      continue;
    }
    if (p[i + 1] == '^') fail(where, ": a negated class with '&&' (offset ", i, ") is not supported");
    // Operands between '[' , the cuts and ']'; a bare list becomes a class.
    std::vector<std::string> ops;
    size_t from = i + 1;
    cuts.push_back(end - 1);
    for (size_t cut : cuts) {
      std::string op(p.substr(from, cut - from));
      if (op.empty()) fail(where, ": empty operand of '&&' at offset ", from);
      std::vector<size_t> inner;
      const bool one_class = op[0] == '[' && class_end(op, 0, inner, where) == op.size();
      ops.push_back(one_class ? op : "[" + op + "]");
      from = cut + 2;
    }
    out += "(?:";
    for (size_t k = 1; k < ops.size(); ++k) out += "(?=" + ops[k] + ")";
    out += ops[0] + ")";
    i = end;
  }
  return out;
}

}  // namespace

std::string rust_regex_to_pcre2(std::string_view pattern, const std::string& where) {
  std::string scripts;
  scripts.reserve(pattern.size() + 32);
  for (size_t i = 0; i < pattern.size();) {
    if (pattern[i] == '\\' && i + 1 < pattern.size()) {
      if (const size_t n = script_property(pattern, i, scripts)) {
        i += n;
      } else {
        scripts.append(pattern.substr(i, 2));
        i += 2;
      }
      continue;
    }
    scripts += pattern[i++];
  }
  return class_intersections(scripts, where);
}

struct Regex::Code {
  pcre2_code* code = nullptr;
  ~Code() { pcre2_code_free(code); }
};

Regex::Regex(std::string_view pattern, bool literal, std::string where)
    : code_(std::make_unique<Code>()), where_(std::move(where)) {
  if (utf8_first_invalid(pattern) != pattern.size()) fail(where_, ": pattern is not valid UTF-8");
  // PCRE2_LITERAL refuses UCP (it has no classes to apply it to).
  // MULTILINE: in Oniguruma's Ruby syntax ^ and $ are line anchors.
  const uint32_t options = literal ? (PCRE2_UTF | PCRE2_LITERAL) : (PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE);
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  const std::string translated = literal ? std::string(pattern) : onig_to_pcre2(pattern);
  code_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(), options, &err,
                              &err_offset, nullptr);
  if (!code_->code) {
    fail(where_, ": cannot compile regex '", translated, "' at offset ", err_offset, ": ", pcre2_message(err));
  }
  // JIT is an optimisation only: when unavailable pcre2_match interprets.
  (void)pcre2_jit_compile(code_->code, PCRE2_JIT_COMPLETE);
}

Regex::~Regex() = default;
Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;

bool Regex::search(std::string_view text, size_t from, Span& match) const {
  MatchScratch& s = scratch();
  const int rc = pcre2_match(code_->code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), from,
                             PCRE2_NO_UTF_CHECK, s.data, s.context);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) fail(where_, ": regex match failed: ", pcre2_message(rc));
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(s.data);
  // \K inside a lookahead can report end < begin; no tokenizer pattern does
  // that, but it must not turn into a wild range.
  if (ov[1] < ov[0]) fail(where_, ": regex reported a match that ends before it starts");
  match = {ov[0], ov[1]};
  return true;
}

void Regex::find_all(std::string_view text, std::vector<Span>& out) const {
  size_t from = 0;
  bool have_last = false;
  size_t last_end = 0;
  Span m{};
  while (from <= text.size() && search(text, from, m)) {
    if (m.begin == m.end && have_last && m.end == last_end) {
      // Skip an empty match touching the previous match: move one character.
      if (from >= text.size()) break;
      const size_t n = utf8_sequence_length(text, from);
      from += n ? n : 1;
      continue;
    }
    out.push_back(m);
    have_last = true;
    last_end = m.end;
    // After an empty match the next search starts at the same place, finds
    // the same empty match, and the rule above moves it on by a character.
    from = m.end;
  }
}

}  // namespace nibble
