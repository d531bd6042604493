// Format detection: the format of every tensor of a checkpoint, and where
// the decision came from (checkpoints.md §3). Metadata (hf_quant_config.json,
// config.json) says what a tensor should be; the tensors themselves (dtype
// and sibling names) say what it is. When they disagree the tensors win and
// a warning says so. Methods nibble cannot run are reported by name.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "format/format.h"
#include "format/weight_view.h"

namespace nibble {

// One logical tensor: a weight matrix with its scale siblings, or a plain
// tensor (norm, bias, hc_*, tid2eid) on its own.
struct DetectedTensor {
  std::string name;        // "layers.0.ffn.experts.3.w1" (weights: without ".weight")
  Format format = Format::f32;
  std::string provenance;  // where the decision came from, for `explain`
  std::vector<const TensorInfo*> parts;  // the stored tensors (weight first)
  bool is_matrix = false;  // a [out, in] weight a linear kernel multiplies
  int64_t rows = 0, cols = 0;  // logical [out, in] when is_matrix
  uint64_t params = 0;     // logical elements (packed FP4 counted unpacked; scales not counted)
  uint64_t bytes = 0;      // stored bytes of all parts
  std::string unsupported; // non-empty: a layout nibble recognises but cannot run (format is meaningless)
};

struct Unsupported {
  std::string method;   // "gptq", "compressed-tensors (pack-quantized)"
  std::string source;   // "config.json quantization_config.quant_method"
  std::string tensor;   // a tensor that carries it, if any
};

struct Detection {
  std::vector<DetectedTensor> tensors;  // sorted by name; every stored tensor in exactly one
  std::vector<std::string> warnings;
  std::vector<Unsupported> unsupported;
  std::string metadata_schema;          // "DeepSeek-V4 stock (fp8 + expert_dtype)", ...
};

// Throws nibble::Error only for what cannot be classified at all (an orphan
// scale tensor, a weight whose scales have the wrong shape).
Detection detect_formats(const Checkpoint& ck);

// A linear kernel's view of one detected weight matrix (zero-copy).
WeightView weight_view(const DetectedTensor& t);

}  // namespace nibble
