#include "tokenizer/model_tokenizer.h"

#include <filesystem>

namespace nibble {

std::string model_tokenizer_path(const std::string& dir) {
  const std::string json = dir + "/tokenizer.json";
  std::error_code ec;
  return std::filesystem::exists(json, ec) ? json : std::string();
}

std::string missing_tokenizer_text() { return "no tokenizer.json"; }

std::optional<Tokenizer> load_model_tokenizer(const std::string& dir) {
  const std::string path = model_tokenizer_path(dir);
  if (path.empty()) return std::nullopt;
  return Tokenizer::from_file(path);
}

}  // namespace nibble
