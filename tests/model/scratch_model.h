// A throw-away copy of a DeepSeek-V4 fixture folder that a test may edit:
// rewrite config.json, or drop tensors from whichever shard holds them
// (keeping model.safetensors.index.json consistent).
#pragma once

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "fixture_util.h"

namespace nibble::test {

class ScratchModel {
 public:
  explicit ScratchModel(const std::string& fixture = "hf_tiny_fp8experts") {
    namespace fs = std::filesystem;
    dir_ = fs::temp_directory_path() / ("nibble_dsv4_" + std::to_string(::getpid()) + "_" + std::to_string(counter()++));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    for (const auto& e : fs::directory_iterator(fixture_dir(fixture)))
      if (e.is_regular_file()) fs::copy_file(e.path(), dir_ / e.path().filename());
    std::ifstream in(dir_ / "config.json");
    config = nlohmann::json::parse(in);
  }
  ~ScratchModel() { std::filesystem::remove_all(dir_); }
  ScratchModel(const ScratchModel&) = delete;
  ScratchModel& operator=(const ScratchModel&) = delete;

  std::string path() const { return dir_.string(); }
  void write_config() const { std::ofstream(dir_ / "config.json") << config.dump(1); }

  // Removes tensor `name` from its shard (and from the index, if any).
  void drop_tensor(const std::string& name) const {
    namespace fs = std::filesystem;
    using nlohmann::json;
    std::string shard = "model.safetensors";
    const fs::path index_path = dir_ / "model.safetensors.index.json";
    json index;
    if (fs::exists(index_path)) {
      std::ifstream in(index_path);
      index = json::parse(in);
      shard = index.at("weight_map").at(name).get<std::string>();
      index["weight_map"].erase(name);
      std::ofstream(index_path) << index.dump(1);
    }
    const fs::path file = dir_ / shard;
    std::vector<char> bytes;
    {
      std::ifstream in(file, std::ios::binary);
      bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    uint64_t n;
    std::memcpy(&n, bytes.data(), 8);
    json header = json::parse(std::string(bytes.data() + 8, size_t(n)));
    if (!header.contains(name)) throw std::runtime_error("no tensor " + name + " in " + shard);
    header.erase(name);
    json out = json::object();
    std::string data;
    for (auto it = header.begin(); it != header.end(); ++it) {
      if (it.key() == "__metadata__") {
        out[it.key()] = it.value();
        continue;
      }
      const auto begin = it.value()["data_offsets"][0].get<uint64_t>();
      const auto end = it.value()["data_offsets"][1].get<uint64_t>();
      json t = it.value();
      t["data_offsets"] = {data.size(), data.size() + (end - begin)};
      data.append(bytes.data() + 8 + n + begin, size_t(end - begin));
      out[it.key()] = t;
    }
    const std::string h = out.dump();
    const uint64_t hn = h.size();
    std::ofstream o(file, std::ios::binary | std::ios::trunc);
    o.write(reinterpret_cast<const char*>(&hn), 8);
    o.write(h.data(), std::streamsize(h.size()));
    o.write(data.data(), std::streamsize(data.size()));
  }

  // Overwrites bytes [offset, offset + bytes.size()) of tensor `name`'s data
  // in place (a corrupted scale code, say).
  void patch_tensor(const std::string& name, uint64_t offset, const std::string& bytes) const {
    namespace fs = std::filesystem;
    using nlohmann::json;
    std::string shard = "model.safetensors";
    const fs::path index_path = dir_ / "model.safetensors.index.json";
    if (fs::exists(index_path)) {
      std::ifstream in(index_path);
      shard = json::parse(in).at("weight_map").at(name).get<std::string>();
    }
    std::fstream f(dir_ / shard, std::ios::binary | std::ios::in | std::ios::out);
    uint64_t n = 0;
    f.read(reinterpret_cast<char*>(&n), 8);
    std::string header(size_t(n), '\0');
    f.read(header.data(), std::streamsize(n));
    const json t = json::parse(header).at(name);
    const auto begin = t.at("data_offsets")[0].get<uint64_t>(), end = t.at("data_offsets")[1].get<uint64_t>();
    if (offset + bytes.size() > end - begin) throw std::runtime_error("patch beyond tensor " + name);
    f.seekp(std::streamoff(8 + n + begin + offset));
    f.write(bytes.data(), std::streamsize(bytes.size()));
    if (!f) throw std::runtime_error("cannot patch " + name + " in " + shard);
  }

  nlohmann::json config;

 private:
  static int& counter() {
    static int c = 0;
    return c;
  }
  std::filesystem::path dir_;
};

}  // namespace nibble::test
