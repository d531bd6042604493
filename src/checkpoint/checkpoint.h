// A model folder as published on the Hub: config.json, optional
// hf_quant_config.json and generation_config.json, and either one
// model.safetensors or shards listed in model.safetensors.index.json.
// Opening validates every shard header and the index against the shards;
// the tensors stay memory-mapped.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/safetensors.h"

namespace nibble {

class Checkpoint {
 public:
  // `path` is a model folder or a single .safetensors file. Throws
  // nibble::Error naming the file (and tensor) for anything malformed.
  static std::unique_ptr<Checkpoint> open(const std::string& path);
  ~Checkpoint();

  const std::string& path() const { return path_; }  // the folder (or the file)
  bool is_folder() const { return is_folder_; }
  const std::vector<std::unique_ptr<SafetensorsFile>>& shards() const { return shards_; }

  // Every tensor, sorted by name.
  const std::vector<const TensorInfo*>& tensors() const { return tensors_; }
  const TensorInfo* find(std::string_view name) const;
  // Like find, but a missing tensor is an error naming it and the folder.
  const TensorInfo& get(std::string_view name) const;
  uint64_t total_bytes() const { return total_bytes_; }
  // metadata.total_size of model.safetensors.index.json when it is a plain
  // integer. Not checked against total_bytes(): published indexes are
  // sometimes off, and `explain` reports a mismatch rather than refusing.
  std::optional<uint64_t> index_total_size() const { return index_total_size_; }

  // Parsed JSON files; config() is an empty object when there is no config.json.
  const nlohmann::json& config() const { return *config_; }
  const nlohmann::json* hf_quant_config() const { return hf_quant_.get(); }
  const nlohmann::json* generation_config() const { return generation_.get(); }
  // Path of a file inside the folder ("tokenizer.json").
  std::string file_path(const std::string& name) const;

 private:
  Checkpoint();

  std::string path_;
  bool is_folder_ = false;
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::vector<const TensorInfo*> tensors_;
  std::map<std::string, const TensorInfo*, std::less<>> by_name_;
  uint64_t total_bytes_ = 0;
  std::optional<uint64_t> index_total_size_;
  // Behind pointers so that this header needs only json_fwd.hpp; config_ is
  // never null (an empty object without config.json), the others are null
  // when their file is absent.
  std::unique_ptr<nlohmann::json> config_, hf_quant_, generation_;
};

// Reads a JSON file; errors name the file. Used for the configs.
nlohmann::json read_json_file(const std::string& path);

}  // namespace nibble
