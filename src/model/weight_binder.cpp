#include "model/weight_binder.h"

#include <algorithm>
#include <cstring>

#include "format/element.h"
#include "kernels/registry.h"
#include "util/error.h"

namespace nibble {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

namespace {

std::vector<float> to_f32(const std::string& path, const TensorInfo& ti) {
  std::vector<float> out(size_t(ti.numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    switch (ti.dtype) {
      case DType::F32: std::memcpy(&out[i], ti.data + i * 4, 4); break;
      case DType::BF16: {
        uint16_t h;
        std::memcpy(&h, ti.data + i * 2, 2);
        out[i] = bf16_decode(h);
        break;
      }
      default: fail(path, ": tensor ", ti.name, " has dtype ", dtype_name(ti.dtype), "; expected F32 or BF16");
    }
  }
  return out;
}

}  // namespace

WeightBinder::WeightBinder(const Checkpoint& ck, const Detection& det, const Plan& plan, const LoadOptions& options,
                           GroupOf group_of)
    : ck_(ck), plan_(plan), options_(options), group_of_(group_of) {
  for (const auto& t : det.tensors) by_name_[t.name] = &t;
  for (const auto& g : plan.groups) total_bytes_ += g.bytes;
}

const DetectedTensor* WeightBinder::find(const std::string& name) const {
  auto it = by_name_.find(name);
  if (it != by_name_.end()) return it->second;
  const std::string suffix = ".weight";
  if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
    it = by_name_.find(name.substr(0, name.size() - suffix.size()));
    if (it != by_name_.end() && it->second->parts[0]->name == name) return it->second;
  }
  return nullptr;
}

bool WeightBinder::has_prefix(const std::string& prefix) const {
  auto it = by_name_.lower_bound(prefix);
  return it != by_name_.end() && it->first.compare(0, prefix.size(), prefix) == 0;
}

const DetectedTensor& WeightBinder::must_find(const std::string& name, const std::string& why) const {
  const DetectedTensor* t = find(name);
  if (!t) fail(ck_.path(), ": tensor ", name, " is missing (", why, ")");
  return *t;
}

const DetectedTensor& WeightBinder::matrix(const std::string& base, int64_t rows, int64_t cols,
                                           const std::string& why) const {
  const DetectedTensor* t = find(base);
  if (!t) fail(ck_.path(), ": tensor ", base, ".weight is missing (", why, ")");
  const TensorInfo& first = *t->parts[0];
  if (!t->is_matrix) {
    if (!t->unsupported.empty()) fail(ck_.path(), ": tensor ", first.name, " uses ", t->unsupported, ", which nibble cannot run");
    fail(ck_.path(), ": tensor ", first.name, " (", dtype_name(first.dtype), " ", first.shape_str(),
         ") is not a weight matrix in a format nibble runs");
  }
  if (t->rows != rows || t->cols != cols)
    fail(ck_.path(), ": tensor ", first.name, " ", first.shape_str(), " holds a matrix of ", shape_str({t->rows, t->cols}),
         " but config.json implies ", shape_str({rows, cols}), " (", why, ")");
  if (!options_.skip_weight_check) check_weight_codes(weight_view(*t));
  if (options_.on_progress) {
    bound_bytes_ += t->bytes;
    options_.on_progress(std::min(bound_bytes_, total_bytes_), total_bytes_);
  }
  return *t;
}

BoundLinear WeightBinder::linear(const std::string& base, int64_t rows, int64_t cols, const std::string& why) const {
  const DetectedTensor& t = matrix(base, rows, cols, why);
  return BoundLinear{weight_view(t), linear_kernel(t)};
}

BoundLinear WeightBinder::f32_linear(const std::string& name, int64_t rows, int64_t cols,
                                     const std::string& why) const {
  const DetectedTensor& t = must_find(name, why);
  const TensorInfo& ti = *t.parts[0];
  if (ti.shape != std::vector<int64_t>{rows, cols})
    fail(ck_.path(), ": tensor ", name, " has shape ", ti.shape_str(), " but config.json implies ",
         shape_str({rows, cols}), " (", why, ")");
  if (ti.dtype != DType::F32 && ti.dtype != DType::BF16)
    fail(ck_.path(), ": tensor ", name, " has dtype ", dtype_name(ti.dtype), "; expected F32 or BF16");
  DetectedTensor m = t;
  m.format = ti.dtype == DType::F32 ? Format::f32 : Format::bf16;
  m.is_matrix = true;
  m.rows = rows;
  m.cols = cols;
  return BoundLinear{weight_view(m), linear_kernel(m)};
}

namespace {

// A CUDA plan's kernels have no host function: the CUDA backend runs each
// format on its own kernel, so binding only checks that the plan found one
// (a matrix no GPU kernel takes is refused at load, not mid-forward).
bool runnable(const KernelDesc* k, bool host_fn, const Device& device) {
  return k && (host_fn || device.kind == DeviceKind::cuda);
}

}  // namespace

LinearFn WeightBinder::linear_kernel(const DetectedTensor& t) const {
  const std::string group = group_of_(t.name, t.format).name;
  for (const auto& g : plan_.groups) {
    if (g.group != group || g.format != t.format || !g.has_op) continue;
    if (g.op != Op::linear) break;
    const KernelDesc* k = g.selection.chosen;
    if (!runnable(k, k && k->linear, plan_.device))
      fail(ck_.path(), ": no linear kernel can run tensor ", t.name, " (", format_name(t.format), ") on ",
           plan_.device.name);
    return k->linear;
  }
  OpShape shape;
  shape.op = Op::linear;
  shape.format = t.format;
  shape.rows = t.rows;
  shape.cols = t.cols;
  shape.batch = options_.plan.batch;
  shape.bytes = double(t.bytes);
  shape.flops = 2.0 * double(t.rows) * double(t.cols);
  Selection sel =
      select_kernel(kernel_registry(), shape, plan_.device, options_.plan.linear_backend, "--linear-backend");
  if (!runnable(sel.chosen, sel.chosen && sel.chosen->linear, plan_.device))
    fail(ck_.path(), ": no linear kernel can run tensor ", t.name, " (", format_name(t.format), ") on ",
         plan_.device.name);
  return sel.chosen->linear;
}

MoeFn WeightBinder::moe_kernel(const DetectedTensor& expert) const {
  const std::string group = group_of_(expert.name, expert.format).name;
  for (const auto& g : plan_.groups) {
    if (g.group != group || g.format != expert.format || !g.has_op || g.op != Op::moe) continue;
    const KernelDesc* k = g.selection.chosen;
    if (!runnable(k, k && k->moe, plan_.device)) break;
    const auto& fmts = k->formats;
    if (std::find(fmts.begin(), fmts.end(), expert.format) == fmts.end()) break;
    return k->moe;
  }
  fail(ck_.path(), ": no MoE kernel can run ", group, " (", format_name(expert.format), ", tensor ", expert.name,
       ") on ", plan_.device.name);
}

std::vector<float> WeightBinder::vec(const std::string& name, const std::vector<int64_t>& shape,
                                     const std::string& why) const {
  const TensorInfo& ti = *must_find(name, why).parts[0];
  if (ti.shape != shape)
    fail(ck_.path(), ": tensor ", name, " has shape ", ti.shape_str(), " but config.json implies ", shape_str(shape),
         " (", why, ")");
  return to_f32(ck_.path(), ti);
}

std::vector<float> WeightBinder::vec(const std::string& name, int64_t n, const std::string& why) const {
  const TensorInfo& ti = *must_find(name, why).parts[0];
  if (n == 1 && ti.shape.empty()) return to_f32(ck_.path(), ti);
  return vec(name, std::vector<int64_t>{n}, why);
}

void WeightBinder::finish_progress() const {
  if (options_.on_progress) options_.on_progress(total_bytes_, total_bytes_);
}

}  // namespace nibble
