#include "checkpoint/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "util/error.h"

namespace nibble {

namespace fs = std::filesystem;
using nlohmann::json;

json read_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, ": cannot open");
  std::stringstream buf;
  buf << in.rdbuf();
  json doc = json::parse(buf.str(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) fail(path, ": not valid JSON");
  return doc;
}

namespace {

// Shards named by the index, in order of first appearance; checks its shape.
std::vector<std::string> shards_from_index(const json& index, const std::string& index_path,
                                           std::map<std::string, std::string>* weight_map) {
  auto wm = index.find("weight_map");
  if (!index.is_object() || wm == index.end() || !wm->is_object())
    fail(index_path, ": missing \"weight_map\" object");
  std::vector<std::string> order;
  std::set<std::string> seen;
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    if (!it->is_string()) fail(index_path, ": weight_map entry ", it.key(), " is not a file name");
    std::string shard = it->get<std::string>();
    if (shard.empty() || shard.find('/') != std::string::npos || shard == "." || shard == "..")
      fail(index_path, ": weight_map entry ", it.key(), " names an invalid shard '", shard, "'");
    (*weight_map)[it.key()] = shard;
    if (seen.insert(shard).second) order.push_back(shard);
  }
  return order;
}

}  // namespace

std::unique_ptr<Checkpoint> Checkpoint::open(const std::string& path) {
  auto ck = std::unique_ptr<Checkpoint>(new Checkpoint());
  ck->path_ = path;
  std::error_code ec;
  if (!fs::exists(path, ec)) fail(path, ": no such file or folder");
  ck->is_folder_ = fs::is_directory(path, ec);

  std::vector<std::string> shard_files;
  std::map<std::string, std::string> weight_map;  // tensor -> shard, from the index
  std::string index_path;
  if (!ck->is_folder_) {
    shard_files.push_back(path);
  } else {
    fs::path dir(path);
    if (fs::exists(dir / "config.json")) ck->config_ = read_json_file((dir / "config.json").string());
    if (!ck->config_.is_object()) fail((dir / "config.json").string(), ": not a JSON object");
    if (fs::exists(dir / "hf_quant_config.json")) {
      ck->hf_quant_ = read_json_file((dir / "hf_quant_config.json").string());
      ck->has_hf_quant_ = true;
    }
    if (fs::exists(dir / "generation_config.json")) {
      ck->generation_ = read_json_file((dir / "generation_config.json").string());
      ck->has_generation_ = true;
    }
    if (fs::exists(dir / "model.safetensors.index.json")) {
      index_path = (dir / "model.safetensors.index.json").string();
      for (const auto& s : shards_from_index(read_json_file(index_path), index_path, &weight_map)) {
        std::string shard = (dir / s).string();
        if (!fs::exists(shard)) fail(index_path, ": names shard ", s, " which is missing from ", path);
        shard_files.push_back(shard);
      }
    } else if (fs::exists(dir / "model.safetensors")) {
      shard_files.push_back((dir / "model.safetensors").string());
    } else {
      for (const auto& e : fs::directory_iterator(dir))
        if (e.path().extension() == ".safetensors") shard_files.push_back(e.path().string());
      std::sort(shard_files.begin(), shard_files.end());
      if (shard_files.empty()) fail(path, ": no .safetensors files and no model.safetensors.index.json");
    }
  }

  for (const auto& f : shard_files) {
    ck->shards_.push_back(std::make_unique<SafetensorsFile>(f));
    for (const auto& t : ck->shards_.back()->tensors()) {
      auto [it, inserted] = ck->by_name_.emplace(t.name, &t);
      if (!inserted) fail("tensor ", t.name, " appears in two shards: ", it->second->file, " and ", f);
      ck->total_bytes_ += t.nbytes;
    }
  }

  if (!index_path.empty()) {
    for (const auto& [name, shard] : weight_map) {
      auto it = ck->by_name_.find(name);
      if (it == ck->by_name_.end())
        fail(index_path, ": tensor ", name, " is listed in shard ", shard, " but not found there");
      if (fs::path(it->second->file).filename() != shard)
        fail(index_path, ": tensor ", name, " is listed in shard ", shard, " but stored in ",
             it->second->file);
    }
    for (const auto& [name, t] : ck->by_name_)
      if (!weight_map.count(name))
        fail(t->file, ": tensor ", name, " is not listed in ", index_path);
  }

  for (const auto& [name, t] : ck->by_name_) ck->tensors_.push_back(t);
  return ck;
}

const TensorInfo* Checkpoint::find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

const TensorInfo& Checkpoint::get(std::string_view name) const {
  const TensorInfo* t = find(name);
  if (!t) fail(path_, ": missing tensor ", name);
  return *t;
}

std::string Checkpoint::file_path(const std::string& name) const {
  return (is_folder_ ? fs::path(path_) / name : fs::path(path_).parent_path() / name).string();
}

}  // namespace nibble
