// `nibble inspect PATH [--json]`: the tensors of a safetensors file or a model
// folder with their storage and detected format.
#include <cstdio>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"
#include "checkpoint/detect.h"
#include "cli/args.h"
#include "cli/usage_error.h"
#include "cli/command.h"
#include "cli/human.h"
#include "util/error.h"

namespace nibble::cli {
namespace {

const std::vector<OptionSpec> kOptions = {
    {"--json", "", "print one JSON object instead of a table"},
};

int run_inspect(const std::vector<std::string>& argv) {
  ParsedArgs args = parse_args(argv, kOptions);
  const std::string usage = "nibble inspect PATH [--json]";
  if (args.help) {
    std::cout << format_help(usage,
                             "Lists the tensors of a .safetensors file or a model folder: name, dtype,\n"
                             "shape, bytes and the detected format (with the tensor it scales, for\n"
                             "scale tensors). Validates every header on the way.",
                             kOptions);
    return 0;
  }
  if (args.positional.size() != 1) usage_fail("expected one PATH (usage: ", usage, ")");
  auto ck = Checkpoint::open(args.positional[0]);
  Detection det = detect_formats(*ck);

  // stored tensor name -> (logical tensor, role)
  struct Role {
    const DetectedTensor* owner;
    bool is_scale;
  };
  std::map<std::string, Role> roles;
  for (const auto& t : det.tensors)
    for (size_t i = 0; i < t.parts.size(); ++i) roles[t.parts[i]->name] = {&t, i > 0};

  auto format_of = [](const DetectedTensor& t) {
    return t.unsupported.empty() ? std::string(format_name(t.format)) : "unsupported";
  };

  if (args.has("--json")) {
    nlohmann::json out;
    out["path"] = ck->path();
    out["tensor_count"] = ck->tensors().size();
    out["bytes"] = ck->total_bytes();
    out["metadata_schema"] = det.metadata_schema;
    out["warnings"] = det.warnings;
    out["unsupported"] = nlohmann::json::array();
    for (const auto& u : det.unsupported)
      out["unsupported"].push_back({{"method", u.method}, {"source", u.source}, {"tensor", u.tensor}});
    auto& list = out["tensors"] = nlohmann::json::array();
    for (const TensorInfo* t : ck->tensors()) {
      const Role& r = roles.at(t->name);
      nlohmann::json j = {{"name", t->name},     {"dtype", dtype_name(t->dtype)},
                          {"shape", t->shape},   {"bytes", t->nbytes},
                          {"file", t->file},     {"format", format_of(*r.owner)},
                          {"role", r.is_scale ? "scale" : "data"}};
      if (r.is_scale) j["scale_of"] = r.owner->name;
      if (!r.owner->unsupported.empty()) j["unsupported"] = r.owner->unsupported;
      list.push_back(j);
    }
    std::cout << out.dump(2) << "\n";
    return 0;
  }

  std::printf("%s: %zu tensors, %s in %zu file(s); metadata: %s\n\n", ck->path().c_str(),
              ck->tensors().size(), human_bytes(double(ck->total_bytes())).c_str(), ck->shards().size(),
              det.metadata_schema.c_str());
  std::printf("%-56s %-8s %-18s %10s  %s\n", "tensor", "dtype", "shape", "bytes", "format");
  for (const TensorInfo* t : ck->tensors()) {
    const Role& r = roles.at(t->name);
    std::string fmt = format_of(*r.owner);
    if (r.is_scale) fmt += " (scale of " + r.owner->name + ")";
    std::printf("%-56s %-8s %-18s %10s  %s\n", t->name.c_str(), dtype_name(t->dtype), t->shape_str().c_str(),
                human_bytes(double(t->nbytes)).c_str(), fmt.c_str());
  }
  for (const auto& u : det.unsupported)
    std::printf("\nunsupported: %s (%s%s)", u.method.c_str(), u.source.c_str(),
                u.tensor.empty() ? "" : (", tensor " + u.tensor).c_str());
  for (const auto& w : det.warnings) std::printf("\nwarning: %s", w.c_str());
  std::printf("\n");
  return 0;
}

RegisterCommand reg({"inspect", "list the tensors of a file or model folder with their formats", run_inspect});

}  // namespace
}  // namespace nibble::cli
