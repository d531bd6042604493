#include "tokenizer/pre_tokenizer.h"

#include <algorithm>
#include <functional>

#include <nlohmann/json.hpp>

#include "tokenizer/regex.h"
#include "util/error.h"

namespace nibble {
namespace {

using nlohmann::json;

// GPT-2's split, used by ByteLevel when use_regex is true: contractions,
// letter runs, number runs and symbol runs each with one optional leading
// space, then whitespace (all but the last space of a run before a word).
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// What Split does with the matched delimiters (Hugging Face's
// SplitDelimiterBehavior).
enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

Behavior parse_behavior(const json& j, const std::string& where) {
  if (!j.is_string()) fail(where, ".behavior: expected a string");
  const std::string s = j.get<std::string>();
  if (s == "Removed") return Behavior::Removed;
  if (s == "Isolated") return Behavior::Isolated;
  if (s == "MergedWithPrevious") return Behavior::MergedWithPrevious;
  if (s == "MergedWithNext") return Behavior::MergedWithNext;
  if (s == "Contiguous") return Behavior::Contiguous;
  fail(where, ".behavior: unsupported value '", s, "'");
}

bool get_bool(const json& j, const char* key, bool fallback, const std::string& where) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) fail(where, ".", key, ": expected true or false");
  return it->get<bool>();
}

// One piece of a split: a byte range and whether it is a delimiter match.
struct Part {
  size_t begin, end;
  bool is_match;
};

// Buffers reused across pieces so that splitting does not allocate per piece.
struct SplitScratch {
  std::vector<Span> matches;
  std::vector<Part> parts;
  std::vector<Part> kept;
};

}  // namespace

struct PreTokenizer::Step {
  enum class Kind { Split, PrefixSpace } kind = Kind::Split;
  std::unique_ptr<Regex> regex;  // Split only
  Behavior behavior = Behavior::Isolated;
  bool invert = false;
};

PreTokenizer::PreTokenizer() = default;
PreTokenizer::~PreTokenizer() = default;
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;

PreTokenizer PreTokenizer::from_json(const json& root, const std::string& where) {
  PreTokenizer pt;
  bool saw_byte_level = false;

  // Sequences nest; flatten them into one list of steps.
  std::function<void(const json&, const std::string&)> add = [&](const json& j, const std::string& at) {
    if (!j.is_object()) fail(at, ": expected an object");
    const auto type_it = j.find("type");
    if (type_it == j.end() || !type_it->is_string()) fail(at, ".type: missing or not a string");
    const std::string type = type_it->get<std::string>();
    if (saw_byte_level) fail(at, ": step '", type, "' after ByteLevel is not supported (ByteLevel must be last)");

    if (type == "Sequence") {
      const auto it = j.find("pretokenizers");
      if (it == j.end() || !it->is_array()) fail(at, ".pretokenizers: missing or not an array");
      for (size_t i = 0; i < it->size(); ++i) add((*it)[i], at + ".pretokenizers[" + std::to_string(i) + "]");
    } else if (type == "Split") {
      const auto pat = j.find("pattern");
      if (pat == j.end() || !pat->is_object()) fail(at, ".pattern: missing or not an object");
      Step step;
      if (pat->contains("Regex") && (*pat)["Regex"].is_string()) {
        step.regex = std::make_unique<Regex>((*pat)["Regex"].get<std::string>(), false, at + ".pattern.Regex");
      } else if (pat->contains("String") && (*pat)["String"].is_string()) {
        step.regex = std::make_unique<Regex>((*pat)["String"].get<std::string>(), true, at + ".pattern.String");
      } else {
        fail(at, ".pattern: expected {\"Regex\": string} or {\"String\": string}");
      }
      const auto beh = j.find("behavior");
      if (beh == j.end()) fail(at, ".behavior: missing");
      step.behavior = parse_behavior(*beh, at);
      step.invert = get_bool(j, "invert", false, at);
      pt.steps_.push_back(std::move(step));
    } else if (type == "Digits") {
      // Hugging Face tests char::is_numeric (categories Nd, Nl, No); a run
      // of single-character matches merged Contiguous is the same as \p{N}+.
      Step step;
      const bool individual = get_bool(j, "individual_digits", false, at);
      step.regex = std::make_unique<Regex>(individual ? "\\p{N}" : "\\p{N}+", false, at);
      step.behavior = Behavior::Isolated;
      pt.steps_.push_back(std::move(step));
    } else if (type == "ByteLevel") {
      saw_byte_level = true;
      if (get_bool(j, "add_prefix_space", true, at)) {
        Step step;
        step.kind = Step::Kind::PrefixSpace;
        pt.steps_.push_back(std::move(step));
      }
      if (get_bool(j, "use_regex", true, at)) {
        Step step;
        step.regex = std::make_unique<Regex>(kGpt2Pattern, false, at + " (GPT-2 regex)");
        step.behavior = Behavior::Isolated;
        pt.steps_.push_back(std::move(step));
      }
    } else {
      fail(at, ": unsupported pre-tokenizer type '", type,
           "' (supported: Sequence, Split, Digits, ByteLevel)");
    }
  };

  if (root.is_null()) fail(where, ": missing; only byte-level BPE (a ByteLevel pre-tokenizer) is supported");
  add(root, where);
  if (!saw_byte_level) {
    fail(where, ": no ByteLevel step; only byte-level BPE tokenizers are supported");
  }
  return pt;
}

PreTokenizer PreTokenizer::tiktoken(std::string_view pattern, const std::string& where) {
  PreTokenizer pt;
  Step step;
  step.regex = std::make_unique<Regex>(rust_regex_to_pcre2(pattern, where), false, where);
  // Inverted and Removed: the matches become the kept pieces and the gaps
  // between them the removed delimiters.
  step.behavior = Behavior::Removed;
  step.invert = true;
  pt.steps_.push_back(std::move(step));
  return pt;
}

namespace {

// Cuts `piece` by the matches of one Split step and appends the resulting
// non-empty pieces. Mirrors Hugging Face: the piece is first covered by
// alternating gaps and matches (empty matches kept, empty gaps not), invert
// swaps the two roles, then the behavior decides what to keep and merge.
void split_piece(std::string_view piece, const Regex& regex, Behavior behavior, bool invert, SplitScratch& s,
                 std::vector<std::string_view>& out) {
  std::vector<Span>& matches = s.matches;
  std::vector<Part>& parts = s.parts;
  std::vector<Part>& kept = s.kept;
  matches.clear();
  regex.find_all(piece, matches);
  parts.clear();
  size_t prev = 0;
  for (const Span& m : matches) {
    if (prev != m.begin) parts.push_back({prev, m.begin, invert});
    parts.push_back({m.begin, m.end, !invert});
    prev = m.end;
  }
  if (prev != piece.size()) parts.push_back({prev, piece.size(), invert});

  // The ranges that survive the behavior, merged as it says.
  kept.clear();
  switch (behavior) {
    case Behavior::Removed:
      for (const Part& p : parts)
        if (!p.is_match) kept.push_back(p);
      break;
    case Behavior::Isolated:
      kept.assign(parts.begin(), parts.end());
      break;
    case Behavior::MergedWithPrevious: {
      bool previous_match = false;
      for (const Part& p : parts) {
        if (p.is_match && !previous_match && !kept.empty()) {
          kept.back().end = p.end;
        } else {
          kept.push_back(p);
        }
        previous_match = p.is_match;
      }
      break;
    }
    case Behavior::MergedWithNext: {
      // The mirror image: walk backwards and merge a match into the piece after it.
      bool previous_match = false;
      for (size_t i = parts.size(); i-- > 0;) {
        const Part& p = parts[i];
        if (p.is_match && !previous_match && !kept.empty()) {
          kept.back().begin = p.begin;
        } else {
          kept.push_back(p);
        }
        previous_match = p.is_match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
    }
    case Behavior::Contiguous: {
      bool previous_match = false;
      for (const Part& p : parts) {
        if (p.is_match == previous_match && !kept.empty()) {
          kept.back().end = p.end;
        } else {
          kept.push_back(p);
        }
        previous_match = p.is_match;
      }
      break;
    }
  }
  for (const Part& p : kept)
    if (p.end > p.begin) out.push_back(piece.substr(p.begin, p.end - p.begin));
}

}  // namespace

void PreTokenizer::split(std::string_view text, PreTokens& out) const {
  const size_t first = out.pieces.size();
  if (!text.empty()) out.pieces.push_back(text);
  std::vector<std::string_view> next;
  SplitScratch scratch;
  for (const Step& step : steps_) {
    next.clear();
    for (size_t i = first; i < out.pieces.size(); ++i) {
      const std::string_view piece = out.pieces[i];
      if (step.kind == Step::Kind::PrefixSpace) {
        // ByteLevel(add_prefix_space): every piece it receives that does not
        // already start with a space gets one.
        if (piece.front() == ' ') {
          next.push_back(piece);
        } else {
          out.owned.push_back(" " + std::string(piece));
          next.push_back(out.owned.back());
        }
      } else {
        split_piece(piece, *step.regex, step.behavior, step.invert, scratch, next);
      }
    }
    out.pieces.resize(first);
    out.pieces.insert(out.pieces.end(), next.begin(), next.end());
  }
}

std::vector<std::string> PreTokenizer::split(std::string_view text) const {
  PreTokens pt;
  split(text, pt);
  return {pt.pieces.begin(), pt.pieces.end()};
}

}  // namespace nibble
