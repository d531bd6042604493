// Binding a checkpoint's detected tensors to a model's weights: finding a
// tensor by the name config.json implies, checking its shape against the
// config (errors name the tensor, the shapes and the config fields), checking
// its codes, reporting load progress, and picking the kernel the plan chose
// for its group. Every architecture's *_weights.cpp binds through one of
// these; only the naming of groups (its layout's tensor_group) differs.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "checkpoint/detect.h"
#include "kernels/plan.h"
#include "model/model.h"
#include "model/ops.h"

namespace nibble {

// "[2, 3]".
std::string shape_str(const std::vector<int64_t>& shape);

class WeightBinder {
 public:
  // The architecture's layout: which group a tensor belongs to (the key of
  // the plan's kernel choice).
  using GroupOf = TensorGroup (*)(const std::string& name, Format format);

  WeightBinder(const Checkpoint& ck, const Detection& det, const Plan& plan, const LoadOptions& options,
               GroupOf group_of);

  // Detection names a tensor "X.weight" by its base "X"; others by their full name.
  const DetectedTensor* find(const std::string& name) const;
  bool has_matrix(const std::string& base) const { return find(base) != nullptr; }
  bool has_prefix(const std::string& prefix) const;

  // The weight matrix `base` (stored as base.weight, or however detection
  // found it) of logical shape [rows, cols]; `why` names the config fields
  // the shape comes from.
  const DetectedTensor& matrix(const std::string& base, int64_t rows, int64_t cols, const std::string& why) const;
  BoundLinear linear(const std::string& base, int64_t rows, int64_t cols, const std::string& why) const;
  // An F32/BF16 tensor [rows, cols] that detection does not list as a
  // matrix (DeepSeek-V4's hc projections), bound as a linear weight, zero-copy.
  BoundLinear f32_linear(const std::string& name, int64_t rows, int64_t cols, const std::string& why) const;

  // The linear kernel for `t`: its group's choice in the plan, or (for
  // groups the plan has no matrix op for) a selection made the same way.
  LinearFn linear_kernel(const DetectedTensor& t) const;
  // The MoE kernel the plan chose for the group of `expert` (a routed
  // expert's matrix); it must take that tensor's format.
  MoeFn moe_kernel(const DetectedTensor& expert) const;

  // A small BF16/F32 tensor of exactly `shape`, copied as f32.
  std::vector<float> vec(const std::string& name, const std::vector<int64_t>& shape, const std::string& why) const;
  // The same for `n` elements of shape [n]; a scalar (n = 1) may be stored as [].
  std::vector<float> vec(const std::string& name, int64_t n, const std::string& why) const;

  // Binding is over: the last progress call reports everything done.
  void finish_progress() const;

  const Checkpoint& checkpoint() const { return ck_; }
  const std::string& path() const { return ck_.path(); }

 private:
  const DetectedTensor& must_find(const std::string& name, const std::string& why) const;

  const Checkpoint& ck_;
  const Plan& plan_;
  const LoadOptions& options_;
  GroupOf group_of_;
  std::map<std::string, const DetectedTensor*> by_name_;
  uint64_t total_bytes_ = 0;          // every group's stored bytes (the plan's)
  mutable uint64_t bound_bytes_ = 0;  // of matrices bound so far (LoadOptions::on_progress)
};

}  // namespace nibble
