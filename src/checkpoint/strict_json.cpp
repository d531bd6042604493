#include "checkpoint/strict_json.h"

#include <unordered_set>
#include <vector>
#include <nlohmann/json.hpp>

#include "util/error.h"

namespace nibble {

using nlohmann::json;

namespace {

// A first, DOM-less pass over the text that only checks keys and depth.
// (nlohmann's parse callback would do the same checks while building the
// DOM, but after each closed object its DOM builder rescans the parent
// object for discarded values: quadratic in the tensors of a shard, 18 s
// for the 135,235 headers of a full-size NVFP4 checkpoint.)
class StrictChecker : public nlohmann::json_sax<json> {
 public:
  StrictChecker(const std::string& what, int max_depth) : what_(what), max_depth_(max_depth) {}
  std::string error;  // set by parse_error

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override {
    open_container();
    // One key set per open object, innermost last. A key always belongs to
    // the innermost open object: arrays have no keys, and an object inside
    // an array pushes its own (empty) set.
    open_objects_.emplace_back();
    return true;
  }
  bool key(string_t& key) override {
    if (!open_objects_.back().insert(key).second) fail(what_, ": duplicate key \"", key, "\"");
    return true;
  }
  bool end_object() override {
    open_objects_.pop_back();
    --depth_;
    return true;
  }
  bool start_array(std::size_t) override {
    open_container();
    return true;
  }
  bool end_array() override {
    --depth_;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    error = e.what();
    return false;
  }

 private:
  void open_container() {
    // depth_ counts the containers already open around this one.
    if (depth_ > max_depth_) fail(what_, ": JSON nests deeper than ", max_depth_ + 1, " levels");
    ++depth_;
  }
  const std::string& what_;
  const int max_depth_;
  int depth_ = 0;
  std::vector<std::unordered_set<std::string>> open_objects_;
};

}  // namespace

json parse_json_strict(std::string_view text, const std::string& what, int max_depth) {
  // nlohmann stops reading at a NUL byte as if the input ended there, so
  // "{}\0garbage" would parse. A raw NUL is never valid JSON (inside a
  // string it must be escaped), so it is rejected up front.
  if (size_t nul = text.find('\0'); nul != std::string_view::npos)
    fail(what, ": not valid JSON (NUL byte at offset ", nul, ")");
  try {
    StrictChecker checker(what, max_depth);
    if (!json::sax_parse(text.begin(), text.end(), &checker)) fail(what, ": not valid JSON (", checker.error, ")");
    return json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    // parse_error (syntax, bad UTF-8) and out_of_range (a number beyond
    // double's range) both end here.
    fail(what, ": not valid JSON (", e.what(), ")");
  }
}

}  // namespace nibble
