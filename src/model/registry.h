// The model registry: one flat list mapping config.json's `architectures[0]`
// to the function that binds a checkpoint to that architecture's forward pass
// (like llama.cpp's per-architecture switch). load_model() is the one entry
// point the CLI and tests use: open, detect formats, plan, bind.
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

struct ModelEntry {
  const char* architecture;  // "DeepseekV4ForCausalLM"
  ModelLoader load;
};

const std::vector<ModelEntry>& model_registry();

// Opens `path` (a model folder) and returns the bound model. Throws
// nibble::Error naming the file/field for an unknown or missing architecture
// and for anything the architecture's loader rejects.
std::unique_ptr<Model> load_model(const std::string& path, const LoadOptions& options = {});
// The same for a checkpoint already opened (a caller that reads its other
// files first, e.g. the Engine's generation_config.json).
std::unique_ptr<Model> load_model(std::unique_ptr<Checkpoint> ck, const LoadOptions& options = {});

}  // namespace nibble
