// The planner on a layout the test supplies, with tensor names no
// architecture uses: every group, its decode bytes and its op come from the
// ModelLayout alone (the planner knows no tensor names and reads no
// config.json), checked against bytes counted by hand.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/plan.h"
#include "util/error.h"

namespace nibble {
namespace {

// A detection of plain BF16 tensors [rows, cols], all matrices (is_matrix),
// with the TensorInfo parts they point to.
struct FakeDetection {
  std::vector<TensorInfo> infos;
  Detection det;

  FakeDetection(const std::vector<std::pair<std::string, std::vector<int64_t>>>& tensors) {
    infos.reserve(tensors.size());  // the parts point into it
    for (const auto& [name, shape] : tensors) {
      TensorInfo ti;
      ti.name = name + ".weight";
      ti.dtype = DType::BF16;
      ti.shape = shape;
      ti.nbytes = uint64_t(shape[0] * shape[1] * 2);
      infos.push_back(ti);
    }
    for (size_t i = 0; i < tensors.size(); ++i) {
      DetectedTensor t;
      t.name = tensors[i].first;
      t.format = Format::bf16;
      t.provenance = "stored dtype of " + t.name;
      t.parts = {&infos[i]};
      t.is_matrix = true;
      t.rows = tensors[i].second[0];
      t.cols = tensors[i].second[1];
      t.params = uint64_t(t.rows * t.cols);
      t.bytes = infos[i].nbytes;
      det.tensors.push_back(t);
    }
  }
};

TensorGroup role(const char* name, DecodeRead read, bool routed = false, bool apart = false,
                 const char* note = "") {
  TensorGroup g;
  g.name = name;
  g.read = read;
  g.routed = routed;
  g.counted_apart = apart;
  g.note = note;
  return g;
}

Device cpu() { return named_device("cpu-avx2", 1, 10.0); }

const GroupPlan& group(const Plan& plan, const std::string& name) {
  for (const auto& g : plan.groups)
    if (g.group == name) return g;
  ADD_FAILURE() << "no group " << name;
  return plan.groups.front();
}

TEST(PlanLayout, GroupsAndBytesComeFromTheLayout) {
  // blk.K.x: dense [8, 16]; blk.K.e.J: 4 experts [8, 16] of which 2 per
  // token; tok: a [10, 16] table read one row at a time; spec.x: loaded, not run.
  FakeDetection f({{"blk.0.e.0", {8, 16}},
                   {"blk.0.e.1", {8, 16}},
                   {"blk.0.e.2", {8, 16}},
                   {"blk.0.e.3", {8, 16}},
                   {"blk.0.x", {8, 16}},
                   {"blk.1.x", {8, 16}},
                   {"spec.x", {8, 16}},
                   {"tok", {10, 16}}});
  f.det.warnings = {"odd blk.0.x", "odd blk.1.x"};
  ModelLayout layout;
  layout.architecture = "ToyForTest";
  layout.layers = 2;
  layout.routed_experts = 4;
  layout.experts_per_token = 2;
  layout.index_words = {{"blk.", "K"}};
  for (int i = 0; i < 4; ++i) layout.tensors.push_back(role("experts", DecodeRead::top_k_experts, true));
  layout.tensors.push_back(role("dense", DecodeRead::all));
  layout.tensors.push_back(role("dense", DecodeRead::all));
  layout.tensors.push_back(role("spec", DecodeRead::none, false, true, "not run"));
  layout.tensors.push_back(role("table", DecodeRead::one_row, false, false, "one row per token"));

  const Plan plan = make_plan("toy", f.det, layout, cpu(), PlanOptions{});
  EXPECT_EQ(plan.architecture, "ToyForTest");
  EXPECT_EQ(plan.layers, 2);
  // 4 groups, in name order.
  ASSERT_EQ(plan.groups.size(), 4u);
  EXPECT_EQ(plan.groups[0].group, "dense");
  EXPECT_EQ(plan.groups[1].group, "experts");
  EXPECT_EQ(plan.groups[2].group, "spec");
  EXPECT_EQ(plan.groups[3].group, "table");

  const uint64_t m = 8 * 16 * 2;  // bytes of one [8, 16] BF16 matrix
  const GroupPlan& dense = group(plan, "dense");
  EXPECT_EQ(dense.tensors, 2);
  EXPECT_EQ(dense.bytes_per_token, 2 * m);
  EXPECT_TRUE(dense.has_op);
  EXPECT_EQ(dense.op, Op::linear);
  EXPECT_EQ(dense.provenance, "stored dtype of blk.K.x");  // folded by the layout's index word

  const GroupPlan& experts = group(plan, "experts");
  EXPECT_EQ(experts.bytes, 4 * m);
  EXPECT_EQ(experts.bytes_per_token, 2 * m);  // 2 of 4 experts
  EXPECT_TRUE(experts.has_op);
  EXPECT_EQ(experts.op, Op::moe);
  ASSERT_NE(experts.selection.chosen, nullptr);

  const GroupPlan& spec = group(plan, "spec");
  EXPECT_EQ(spec.bytes_per_token, 0u);
  EXPECT_EQ(spec.note, "not run");

  const GroupPlan& table = group(plan, "table");
  EXPECT_EQ(table.bytes_per_token, 16u * 2);  // one row of [10, 16] BF16
  EXPECT_FALSE(table.has_op);
  EXPECT_EQ(table.note, "one row per token");

  EXPECT_EQ(plan.bytes_per_token, 2 * m + 2 * m + 0 + 32);
  EXPECT_EQ(plan.params, uint64_t(6 * 128 + 160));  // spec.x is counted apart
  EXPECT_EQ(plan.mtp_params, 128u);
  // The two warnings differ only in the index: one line with a count.
  ASSERT_EQ(plan.warnings.size(), 1u);
  EXPECT_EQ(plan.warnings[0], "odd blk.K.x [2 tensors]");
}

TEST(PlanLayout, ALayoutThatDoesNotFitTheDetectionIsRefused) {
  FakeDetection f({{"a", {8, 16}}, {"b", {8, 16}}});
  ModelLayout layout;
  layout.architecture = "ToyForTest";
  layout.tensors = {role("g", DecodeRead::all)};
  try {
    make_plan("toy", f.det, layout, cpu(), PlanOptions{});
    ADD_FAILURE() << "a layout of 1 tensor for 2 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("names 1 tensors but detection found 2"), std::string::npos) << e.what();
  }
  // Two tensors of one (group, format) read differently.
  layout.tensors = {role("g", DecodeRead::all), role("g", DecodeRead::none)};
  try {
    make_plan("toy", f.det, layout, cpu(), PlanOptions{});
    ADD_FAILURE() << "a group read two ways was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor b in group g"), std::string::npos) << e.what();
  }
  // Routed experts without counts have no bytes per token.
  layout.tensors = {role("g", DecodeRead::top_k_experts, true), role("g", DecodeRead::top_k_experts, true)};
  try {
    make_plan("toy", f.det, layout, cpu(), PlanOptions{});
    ADD_FAILURE() << "routed experts without counts were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no expert counts"), std::string::npos) << e.what();
  }
}

TEST(PlanLayout, AnUnsupportedMethodIsNamedFirst) {
  FakeDetection f({{"a", {8, 16}}});
  f.det.unsupported = {{"gptq", "config.json quantization_config.quant_method", ""}};
  try {
    check_methods_supported("toy", f.det);
    ADD_FAILURE() << "gptq was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("quantization method 'gptq'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace nibble
