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

// The little-endian bytes of a template tensor's stated values (an I64 /
// I32 tensor such as compressed-tensors' weight_shape, which detection
// reads: a sparse all-zero one would contradict its weight_packed).
std::string value_bytes(const json& values, const TensorSpec& t, const std::string& at) {
  const size_t width = t.dtype == DType::I64 ? 8 : t.dtype == DType::I32 ? 4 : 0;
  int64_t numel = 1;
  for (int64_t d : t.shape) numel *= d;
  if (!width || !values.is_array() || int64_t(values.size()) != numel)
    fail(at, ": tensor ", t.name, ": values are for I64 / I32 tensors, one integer per element");
  std::string out;
  for (const auto& v : values) {
    if (!v.is_number_integer()) fail(at, ": tensor ", t.name, ": value ", v.dump(), " is not an integer");
    const int64_t x = v.get<int64_t>();
    for (size_t b = 0; b < width; ++b) out.push_back(char(uint64_t(x) >> (8 * b) & 0xff));
  }
  return out;
}

// One template's tensors with their names relative to the group prefix;
// `values` receives the bytes of those that state their values.
std::vector<TensorSpec> expand_template(const json& tp, const std::string& tp_name, const std::string& where,
                                        std::map<std::string, std::string>& values) {
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
      if (!e.is_array() || (e.size() != 3 && e.size() != 4) || !e[0].is_string() || !e[1].is_string() ||
          !e[2].is_array())
        fail(at, ": entries must be [name, dtype, shape] or [name, dtype, shape, values], got ", e.dump());
      auto dtype = parse_dtype(e[1].get<std::string>());
      if (!dtype) fail(at, ": tensor ", e[0].get<std::string>(), ": unknown dtype ", e[1].dump());
      TensorSpec t{sub + e[0].get<std::string>(), *dtype, {}};
      for (const auto& d : e[2]) {
        if (!d.is_number_unsigned()) fail(at, ": tensor ", t.name, ": bad shape ", e[2].dump());
        t.shape.push_back(d.get<int64_t>());
      }
      if (e.size() == 4) values[t.name] = value_bytes(e[3], t, at);
      out.push_back(std::move(t));
    }
  }
  return out;
}

// Bash-style brace expansion: "a.{0..2}.{x,y}" -> a.0.x a.0.y a.1.x ... a.2.y
// (left to right, the first brace varying slowest). A brace holding neither
// ".." nor "," is kept as written.
std::vector<std::string> expand_braces(const std::string& s, const std::string& at) {
  size_t open = s.find('{');
  while (open != std::string::npos) {
    size_t close = s.find('}', open);
    if (close == std::string::npos) fail(at, ": unclosed brace in ", s);
    const std::string inner = s.substr(open + 1, close - open - 1);
    std::vector<std::string> alts;
    if (size_t dots = inner.find(".."); dots != std::string::npos) {
      const std::string lo_s = inner.substr(0, dots), hi_s = inner.substr(dots + 2);
      if (lo_s.empty() || hi_s.empty() || lo_s.find_first_not_of("0123456789") != std::string::npos ||
          hi_s.find_first_not_of("0123456789") != std::string::npos)
        fail(at, ": bad range {", inner, "} in ", s);
      const long lo = std::stol(lo_s), hi = std::stol(hi_s);
      if (lo > hi) fail(at, ": empty range {", inner, "} in ", s);
      for (long v = lo; v <= hi; ++v) alts.push_back(std::to_string(v));
    } else if (inner.find(',') != std::string::npos) {
      for (size_t b = 0;;) {
        size_t e = inner.find(',', b);
        alts.push_back(inner.substr(b, e == std::string::npos ? std::string::npos : e - b));
        if (e == std::string::npos) break;
        b = e + 1;
      }
    } else {
      open = s.find('{', close);
      continue;
    }
    std::vector<std::string> out;
    const std::string head = s.substr(0, open);
    const std::vector<std::string> tails = expand_braces(s.substr(close + 1), at);
    for (const auto& a : alts)
      for (const auto& tail : tails) out.push_back(head + a + tail);
    return out;
  }
  return {s};
}

// A file's JSON with brace expansion applied to object keys and to the
// strings of arrays (values stay as written).
json expand_file(const json& j, const std::string& at) {
  if (j.is_object()) {
    json out = json::object();
    for (auto it = j.begin(); it != j.end(); ++it) {
      json v = expand_file(it.value(), at);
      for (auto& k : expand_braces(it.key(), at)) {
        if (out.contains(k)) fail(at, ": key ", k, " appears twice after expansion");
        out[k] = v;
      }
    }
    return out;
  }
  if (j.is_array()) {
    json out = json::array();
    for (const auto& e : j) {
      if (e.is_string())
        for (auto& x : expand_braces(e.get<std::string>(), at)) out.push_back(std::move(x));
      else
        out.push_back(expand_file(e, at));
    }
    return out;
  }
  return j;
}

// Writes the header, the stated values at their tensors' offsets, and
// extends the file to its full size without other data.
void write_sparse_shard(const std::string& path, const SafetensorsLayout& lay, const std::vector<TensorSpec>& specs,
                        const std::map<std::string, std::string>& values) {
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
  for (size_t i = 0; i < specs.size(); ++i) {
    auto v = values.find(specs[i].name);
    if (v == values.end()) continue;
    if (::pwrite(fd, v->second.data(), v->second.size(), off_t(lay.offsets[i])) != ssize_t(v->second.size())) {
      int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      fail(tmp, ": write of tensor ", specs[i].name, " failed: ", std::strerror(err));
    }
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
    // {n:05} / {count:05}: 1-based (model-00001-of-00046); {k:05} / {last:05}:
    // 0-based, as gpt-oss publishes its shards (model-00000-of-00002 .. 00002-of-00002).
    std::string file = replace_all(replace_all(shard_name, "{n:05}", zero_padded(k + 1, 5)), "{count:05}",
                                   zero_padded(shards.size(), 5));
    file = replace_all(replace_all(file, "{k:05}", zero_padded(k, 5)), "{last:05}", zero_padded(shards.size() - 1, 5));
    const std::string at = where + ": shard " + file;
    std::vector<TensorSpec> specs;
    std::map<std::string, std::string> values;  // relative name -> bytes, then full name
    for (const auto& group : shards[k]) {
      const std::string prefix = member(group, "prefix", at).get<std::string>();
      for (const auto& use : member(group, "use", at)) {
        const std::string tp_name = use.get<std::string>();
        if (!templates.contains(tp_name)) fail(at, ": uses unknown template ", tp_name);
        std::map<std::string, std::string> tp_values;
        for (auto& t : expand_template(templates.at(tp_name), tp_name, where, tp_values)) {
          if (auto v = tp_values.find(t.name); v != tp_values.end()) values[prefix + t.name] = v->second;
          t.name = prefix + t.name;
          specs.push_back(std::move(t));
        }
      }
    }
    sort_like_safetensors(specs);
    std::string path = (fs::path(dir) / file).string();
    SafetensorsLayout lay = plan_safetensors(specs, metadata, path);  // rejects duplicates in a shard
    write_sparse_shard(path, lay, specs, values);
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
  if (doc.contains("files")) {
    const json& files = doc.at("files");
    if (!files.is_object()) fail(where, ": \"files\" must be an object");
    for (auto it = files.begin(); it != files.end(); ++it) {
      if (it.key().find('/') != std::string::npos || it.key() == "config.json")
        fail(where, ": files: bad file name ", it.key());
      write_file_atomic((fs::path(dir) / it.key()).string(),
                        expand_file(it.value(), where + ": files: " + it.key()).dump(2) + "\n");
    }
  }
  write_safetensors_index((fs::path(dir) / "model.safetensors.index.json").string(), sum.total_size,
                          weight_map);
  return sum;
}

std::string dsv4_flash_skeleton_template() {
  return std::string(NIBBLE_SOURCE_DIR) + "/tests/fixtures/checkpoints/dsv4_flash_skeleton.json";
}

std::string dsv4_flash_skeleton_template(const std::string& variant) {
  if (variant == "stock") return dsv4_flash_skeleton_template();
  if (variant != "nvfp4_current" && variant != "nvfp4_early")
    fail("no DeepSeek-V4-Flash skeleton variant ", variant, " (stock, nvfp4_current, nvfp4_early)");
  return std::string(NIBBLE_SOURCE_DIR) + "/tests/fixtures/checkpoints/dsv4_flash_" + variant + "_skeleton.json";
}

std::string write_dsv4_flash_skeleton(const std::string& dir) { return write_dsv4_flash_skeleton(dir, "stock"); }

std::string write_dsv4_flash_skeleton(const std::string& dir, const std::string& variant) {
  write_skeleton_checkpoint(dsv4_flash_skeleton_template(variant), dir);
  return dir;
}

std::string gpt_oss_skeleton_template(const std::string& size) {
  if (size != "20b" && size != "120b") fail("gpt-oss skeleton: size ", size, " is not 20b or 120b");
  return std::string(NIBBLE_SOURCE_DIR) + "/tests/fixtures/checkpoints/gpt_oss_" + size + "_skeleton.json";
}

std::string write_gpt_oss_skeleton(const std::string& dir, const std::string& size) {
  write_skeleton_checkpoint(gpt_oss_skeleton_template(size), dir);
  return dir;
}

std::string dsv3_skeleton_template(const std::string& which) {
  if (which != "deepseek_v3" && which != "kimi_k2")
    fail("DeepSeek-V3 skeleton: ", which, " is not deepseek_v3 or kimi_k2");
  return std::string(NIBBLE_SOURCE_DIR) + "/tests/fixtures/dsv3/" + which + "_skeleton.json";
}

std::string write_dsv3_skeleton(const std::string& dir, const std::string& which) {
  write_skeleton_checkpoint(dsv3_skeleton_template(which), dir);
  return dir;
}

}  // namespace nibble
