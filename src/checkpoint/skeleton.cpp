#include "checkpoint/skeleton.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>
#include <vector>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"
#include "checkpoint/safetensors_writer.h"
#include "util/error.h"

namespace nibble {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t pos = s.find(from); pos != std::string::npos; pos = s.find(from, pos + to.size()))
    s.replace(pos, from.size(), to);
  return s;
}

std::string zero_padded(size_t v, int width) {
  std::string s = std::to_string(v);
  return s.size() < size_t(width) ? std::string(width - s.size(), '0') + s : s;
}

const json& member(const json& obj, const char* key, const std::string& where) {
  if (!obj.is_object() || !obj.contains(key)) fail(where, ": missing \"", key, "\"");
  return obj.at(key);
}

// One template's tensors with their names relative to the group prefix.
std::vector<TensorSpec> expand_template(const json& tp, const std::string& tp_name,
                                        const std::string& where) {
  const std::string at = where + ": template " + tp_name;
  int64_t repeat = 1;
  if (tp.contains("repeat")) {
    if (!tp.at("repeat").is_number_unsigned()) fail(at, ": \"repeat\" must be a count");
    repeat = tp.at("repeat").get<int64_t>();
  }
  std::string prefix;
  if (tp.contains("prefix")) {
    if (!tp.at("prefix").is_string()) fail(at, ": \"prefix\" must be a string");
    prefix = tp.at("prefix").get<std::string>();
  }
  const json& tensors = member(tp, "tensors", at);
  if (!tensors.is_array()) fail(at, ": \"tensors\" must be an array");
  std::vector<TensorSpec> out;
  for (int64_t i = 0; i < repeat; ++i) {
    std::string sub = replace_all(prefix, "{i}", std::to_string(i));
    for (const auto& e : tensors) {
      if (!e.is_array() || e.size() != 3 || !e[0].is_string() || !e[1].is_string() || !e[2].is_array())
        fail(at, ": entries must be [name, dtype, shape], got ", e.dump());
      auto dtype = parse_dtype(e[1].get<std::string>());
      if (!dtype) fail(at, ": tensor ", e[0].get<std::string>(), ": unknown dtype ", e[1].dump());
      TensorSpec t{sub + e[0].get<std::string>(), *dtype, {}};
      for (const auto& d : e[2]) {
        if (!d.is_number_unsigned()) fail(at, ": tensor ", t.name, ": bad shape ", e[2].dump());
        t.shape.push_back(d.get<int64_t>());
      }
      out.push_back(std::move(t));
    }
  }
  return out;
}

// Writes the header and extends the file to its full size without data.
void write_sparse_shard(const std::string& path, const SafetensorsLayout& lay) {
  std::string tmp = path + ".partial";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail(tmp, ": cannot create: ", std::strerror(errno));
  size_t done = 0;
  while (done < lay.header.size()) {
    ssize_t w = ::write(fd, lay.header.data() + done, lay.header.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      fail(tmp, ": write failed: ", std::strerror(err));
    }
    done += size_t(w);
  }
  if (::ftruncate(fd, off_t(lay.file_size)) != 0) {
    int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    fail(tmp, ": cannot extend to ", lay.file_size, " bytes: ", std::strerror(err));
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    fail(path, ": cannot rename into place: ", std::strerror(err));
  }
}

}  // namespace

SkeletonSummary write_skeleton_checkpoint(const std::string& template_path, const std::string& dir) {
  const json doc = read_json_file(template_path);
  const std::string& where = template_path;
  const json& templates = member(doc, "templates", where);
  const json& shards = member(doc, "shards", where);
  const json& config = member(doc, "config", where);
  const std::string shard_name = member(doc, "shard_name", where).get<std::string>();
  if (!shards.is_array() || shards.empty()) fail(where, ": \"shards\" must be a non-empty array");
  std::map<std::string, std::string> metadata;
  if (doc.contains("shard_metadata"))
    for (const auto& [k, v] : doc.at("shard_metadata").items()) metadata[k] = v.get<std::string>();

  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail(dir, ": cannot create: ", ec.message());

  SkeletonSummary sum;
  sum.dir = dir;
  std::map<std::string, std::string> weight_map;
  for (size_t k = 0; k < shards.size(); ++k) {
    std::string file = replace_all(replace_all(shard_name, "{n:05}", zero_padded(k + 1, 5)), "{count:05}",
                                   zero_padded(shards.size(), 5));
    const std::string at = where + ": shard " + file;
    std::vector<TensorSpec> specs;
    for (const auto& group : shards[k]) {
      const std::string prefix = member(group, "prefix", at).get<std::string>();
      for (const auto& use : member(group, "use", at)) {
        const std::string tp_name = use.get<std::string>();
        if (!templates.contains(tp_name)) fail(at, ": uses unknown template ", tp_name);
        for (auto& t : expand_template(templates.at(tp_name), tp_name, where)) {
          t.name = prefix + t.name;
          specs.push_back(std::move(t));
        }
      }
    }
    sort_like_safetensors(specs);
    std::string path = (fs::path(dir) / file).string();
    SafetensorsLayout lay = plan_safetensors(specs, metadata, path);  // rejects duplicates in a shard
    write_sparse_shard(path, lay);
    for (size_t i = 0; i < specs.size(); ++i) {
      if (!weight_map.emplace(specs[i].name, file).second)
        fail(at, ": tensor ", specs[i].name, " is already in shard ", weight_map[specs[i].name]);
      sum.total_size += lay.nbytes[i];
      ++sum.by_dtype[dtype_name(specs[i].dtype)];
    }
    sum.tensors += specs.size();
    ++sum.shards;
  }
  write_file_atomic((fs::path(dir) / "config.json").string(), config.dump(2) + "\n");
  write_safetensors_index((fs::path(dir) / "model.safetensors.index.json").string(), sum.total_size,
                          weight_map);
  return sum;
}

std::string dsv4_flash_skeleton_template() {
  return std::string(NIBBLE_SOURCE_DIR) + "/tests/fixtures/checkpoints/dsv4_flash_skeleton.json";
}

std::string write_dsv4_flash_skeleton(const std::string& dir) {
  write_skeleton_checkpoint(dsv4_flash_skeleton_template(), dir);
  return dir;
}

}  // namespace nibble
