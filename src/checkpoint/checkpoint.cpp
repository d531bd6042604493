#include "checkpoint/checkpoint.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "checkpoint/strict_json.h"
#include "util/error.h"

namespace nibble {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, ": cannot open: ", std::strerror(errno));
  std::stringstream buf;
  buf << in.rdbuf();
  if (in.bad()) fail(path, ": read error");
  return buf.str();
}

// fs::exists / is_directory without exceptions: a permission problem reads
// as "absent" and the caller's own message names the path.
bool path_exists(const fs::path& p) {
  std::error_code ec;
  return fs::exists(p, ec) && !ec;
}

// Shards named by the index, in order of first appearance; checks its shape.
std::vector<std::string> shards_from_index(const json& index, const std::string& index_path,
                                           std::map<std::string, std::string>* weight_map,
                                           std::optional<uint64_t>* total_size) {
  if (!index.is_object()) fail(index_path, ": not a JSON object");
  auto wm = index.find("weight_map");
  if (wm == index.end() || !wm->is_object()) fail(index_path, ": missing \"weight_map\" object");
  if (wm->empty()) fail(index_path, ": \"weight_map\" lists no tensors");
  auto meta = index.find("metadata");
  if (meta != index.end() && meta->is_object()) {
    auto ts = meta->find("total_size");
    // Writers disagree on its type (int, float, string); only a plain
    // non-negative integer is kept, the rest is ignored like HF does.
    if (ts != meta->end() && ts->is_number_unsigned()) *total_size = ts->get<uint64_t>();
  }
  std::vector<std::string> order;
  std::set<std::string> seen;
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    if (!it->is_string())
      fail(index_path, ": weight_map entry ", it.key(), " is a JSON ", it->type_name(),
           ", not a file name");
    const std::string& shard = it->get_ref<const std::string&>();
    // Shards live next to the index: no paths, so an index cannot point
    // outside its folder.
    if (shard.empty() || shard.find('/') != std::string::npos || shard == "." || shard == "..")
      fail(index_path, ": weight_map entry ", it.key(), " names an invalid shard \"", shard, "\"");
    (*weight_map)[it.key()] = shard;
    if (seen.insert(shard).second) order.push_back(shard);
  }
  return order;
}

// An optional JSON file of the folder that must hold an object.
// The parsed object, or null when the file is absent.
std::unique_ptr<json> read_optional_object(const fs::path& p) {
  if (!path_exists(p)) return nullptr;
  auto out = std::make_unique<json>(read_json_file(p.string()));
  if (!out->is_object()) fail(p.string(), ": is a JSON ", out->type_name(), ", not an object");
  return out;
}

}  // namespace

json read_json_file(const std::string& path) {
  std::string text = read_text_file(path);
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) fail(path, ": not valid JSON");
  return doc;
}

Checkpoint::Checkpoint() : config_(std::make_unique<json>(json::object())) {}
Checkpoint::~Checkpoint() = default;

std::unique_ptr<Checkpoint> Checkpoint::open(const std::string& path) {
  auto ck = std::unique_ptr<Checkpoint>(new Checkpoint());
  ck->path_ = path;
  if (!path_exists(path)) fail(path, ": no such file or folder");
  std::error_code ec;
  ck->is_folder_ = fs::is_directory(path, ec);

  std::vector<std::string> shard_files;
  std::map<std::string, std::string> weight_map;  // tensor -> shard, from the index
  std::string index_path;
  if (!ck->is_folder_) {
    shard_files.push_back(path);
  } else {
    fs::path dir(path);
    if (auto cfg = read_optional_object(dir / "config.json")) ck->config_ = std::move(cfg);
    ck->hf_quant_ = read_optional_object(dir / "hf_quant_config.json");
    ck->generation_ = read_optional_object(dir / "generation_config.json");
    if (path_exists(dir / "model.safetensors.index.json")) {
      index_path = (dir / "model.safetensors.index.json").string();
      // Strict: a tensor listed twice could point at two different shards.
      json index = parse_json_strict(read_text_file(index_path), index_path, /*max_depth=*/16);
      for (const auto& s : shards_from_index(index, index_path, &weight_map, &ck->index_total_size_)) {
        std::string shard = (dir / s).string();
        if (!path_exists(shard)) fail(index_path, ": names shard ", s, " which is missing from ", path);
        shard_files.push_back(shard);
      }
    } else if (path_exists(dir / "model.safetensors")) {
      shard_files.push_back((dir / "model.safetensors").string());
    } else {
      for (const auto& e : fs::directory_iterator(dir, ec))
        if (e.path().extension() == ".safetensors") shard_files.push_back(e.path().string());
      if (ec) fail(path, ": cannot list the folder: ", ec.message());
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

  ck->tensors_.reserve(ck->by_name_.size());
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
