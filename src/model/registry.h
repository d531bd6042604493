// The model registry: one flat list mapping config.json's `architectures[0]`
// to the architecture's layout (what the planner needs to know of its
// tensors) and to the function that binds a checkpoint to its forward pass
// (like llama.cpp's per-architecture switch). load_model() is the one entry
// point the CLI and tests use: open, detect formats, plan, bind;
// plan_model() is its planning half, which `nibble explain` prints.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "checkpoint/detect.h"
#include "kernels/plan.h"
#include "model/model.h"

namespace nibble {

// Binds an opened checkpoint; takes ownership of it (weights stay mapped).
using ModelLoader = std::unique_ptr<Model> (*)(std::unique_ptr<Checkpoint> ck, const Detection& det,
                                               Plan plan, const LoadOptions& options);

// The groups of an opened checkpoint's tensors and its config's counts;
// throws nibble::Error where config.json contradicts the tensors.
using ModelLayoutFn = ModelLayout (*)(const Checkpoint& ck, const Detection& det);

struct ModelEntry {
  const char* architecture;  // "DeepseekV4ForCausalLM"
  ModelLayoutFn layout;
  ModelLoader load;
};

const std::vector<ModelEntry>& model_registry();

// The entry for `ck`'s config.json architectures[0]. Throws nibble::Error
// naming config.json when the field is missing or names an architecture
// nibble does not run.
const ModelEntry& model_entry(const Checkpoint& ck);

// The plan for `ck` on `device`: its architecture's layout, planned; a
// checkpoint of an architecture nibble does not run (or of none) is planned
// with the DeepSeek / HF grouping, so that explain can show its kernels. A
// quantization method nibble cannot run is reported first.
Plan plan_model(const Checkpoint& ck, const Detection& det, const Device& device, const PlanOptions& options);

// Opens `path` (a model folder) and returns the bound model. Throws
// nibble::Error naming the file/field for an unknown or missing architecture
// and for anything the architecture's loader rejects.
std::unique_ptr<Model> load_model(const std::string& path, const LoadOptions& options = {});
// The same for a checkpoint already opened (a caller that reads its other
// files first, e.g. the Engine's generation_config.json).
std::unique_ptr<Model> load_model(std::unique_ptr<Checkpoint> ck, const LoadOptions& options = {});

}  // namespace nibble
