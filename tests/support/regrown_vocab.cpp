#include "support/regrown_vocab.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "checkpoint/safetensors.h"
#include "checkpoint/safetensors_writer.h"

namespace nibble::test {
namespace {

uint16_t bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return uint16_t((u + 0x7fff + ((u >> 16) & 1)) >> 16);  // round to nearest even
}

bool regrown(const std::string& name) { return name == "model.embed_tokens.weight" || name == "lm_head.weight"; }

}  // namespace

void write_regrown_vocab_model(const RegrownVocab& r, const std::string& dir) {
  SafetensorsFile src(r.fixture + "/model.safetensors");
  std::ifstream cf(r.fixture + "/config.json");
  nlohmann::json cfg = nlohmann::json::parse(cf);
  const int64_t hidden = cfg.at("hidden_size").get<int64_t>();
  cfg["vocab_size"] = r.vocab;
  for (const auto& [k, v] : r.config.items()) cfg[k] = v;
  std::ofstream(dir + "/config.json") << cfg.dump(2);
  for (const std::string& f : r.tokenizer_files) std::filesystem::copy_file(r.tokenizer + "/" + f, dir + "/" + f);

  std::vector<TensorSpec> specs;
  for (const TensorInfo& t : src.tensors()) {
    TensorSpec s{t.name, t.dtype, t.shape};
    if (regrown(t.name)) s.shape = {r.vocab, hidden};
    specs.push_back(s);
  }
  SafetensorsWriter w(dir + "/model.safetensors", specs);
  std::mt19937 rng(r.seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint16_t> rows(size_t(r.vocab * hidden));
  for (const TensorInfo& t : src.tensors()) {
    if (!regrown(t.name)) {
      w.write_tensor(t.name, t.data, t.nbytes);
      continue;
    }
    for (int64_t row = 0; row < r.vocab; ++row) {
      const float scale = r.row_scale(t.name, row);
      for (int64_t c = 0; c < hidden; ++c) rows[size_t(row * hidden + c)] = bf16(scale * normal(rng));
    }
    w.write_tensor(t.name, rows.data(), rows.size() * 2);
  }
  w.finish();
}

}  // namespace nibble::test
