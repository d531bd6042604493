// The full-size DeepSeek-V3 (671B, FP8 block-128) and Kimi K2 Thinking (1T,
// INT4 routed experts) skeletons (published names, shapes, dtypes and
// config.json; sparse shards): detection reads every tensor in its published
// format, and the plan's parameters and bytes per decoded token equal what
// the published dimensions give when counted by hand below (and the
// published "671B" / "1T" parameter counts).
#include <gtest/gtest.h>

#include "checkpoint/skeleton.h"
#include "device/device.h"
#include "model/registry.h"
#include "support/run_nibble.h"
#include "support/temp_dir.h"

namespace nibble {
namespace {

struct Dims {
  uint64_t V, D, H, L, K, E, I, Id, ql, C, n, r, v, topk, mtp;
  bool fp8;  // else INT4 experts, BF16 elsewhere
};

struct Counted {
  uint64_t params = 0, mtp_params = 0, bytes_per_token = 0;
};

uint64_t tiles(uint64_t x) { return (x + 127) / 128; }

// Bytes of one [rows, cols] weight as published.
uint64_t dense_bytes(const Dims& d, uint64_t rows, uint64_t cols) {
  return d.fp8 ? rows * cols + 4 * tiles(rows) * tiles(cols) : 2 * rows * cols;
}
// A routed expert matrix: FP8 as above, or INT4: packed codes, a BF16 scale
// per 32, and the I64 [2] weight_shape.
uint64_t expert_bytes(const Dims& d, uint64_t rows, uint64_t cols) {
  return d.fp8 ? dense_bytes(d, rows, cols) : rows * cols / 2 + 2 * rows * cols / 32 + 16;
}

Counted count(const Dims& d) {
  const uint64_t D = d.D, qk = d.n + d.r;
  // Attention: q_a, q_b, kv_a_proj_with_mqa, kv_b, o; norms: input,
  // post_attention, q_a_layernorm, kv_a_layernorm (BF16).
  const uint64_t attn_p = d.ql * D + d.H * qk * d.ql + (d.C + d.r) * D + d.H * (d.n + d.v) * d.C + D * d.H * d.v;
  const uint64_t norm_p = 2 * D + d.ql + d.C;
  const uint64_t attn_b = dense_bytes(d, d.ql, D) + dense_bytes(d, d.H * qk, d.ql) + dense_bytes(d, d.C + d.r, D) +
                          dense_bytes(d, d.H * (d.n + d.v), d.C) + dense_bytes(d, D, d.H * d.v) + 2 * norm_p;
  const uint64_t dense_p = 3 * d.Id * D, dense_b = 2 * dense_bytes(d, d.Id, D) + dense_bytes(d, D, d.Id);
  // MoE: router BF16 [E, D] + F32 bias [E], one shared expert of width I, E experts.
  const uint64_t moe_p = d.E * D + d.E + 3 * d.I * D;
  const uint64_t moe_b = 2 * d.E * D + 4 * d.E + 2 * dense_bytes(d, d.I, D) + dense_bytes(d, D, d.I);
  const uint64_t expert_p = 3 * d.I * D;
  const uint64_t expert_b = 2 * expert_bytes(d, d.I, D) + expert_bytes(d, D, d.I);
  const uint64_t moe_layers = d.L - d.K;
  Counted c;
  c.params = 2 * d.V * D + D + d.L * (attn_p + norm_p) + d.K * dense_p + moe_layers * (moe_p + d.E * expert_p);
  // MTP layer: a MoE decoder layer + enorm, hnorm, eh_proj [D, 2D],
  // shared_head.norm, shared_head.head [V, D], embed_tokens [V, D].
  c.mtp_params = d.mtp * (attn_p + norm_p + moe_p + d.E * expert_p + 3 * D + 2 * D * D + 2 * d.V * D);
  // A token reads one embedding row, every dense weight, top-k experts per
  // MoE layer, the final norm and the head; the MTP layer not at all.
  c.bytes_per_token = 2 * D + d.L * attn_b + d.K * dense_b + moe_layers * (moe_b + d.topk * expert_b) + 2 * D +
                      2 * d.V * D;
  return c;
}

void check(const std::string& which, const Dims& dims, double published_b, double tolerance_b) {
  test::TempDir dir;
  write_dsv3_skeleton(dir.str(), which);
  auto ck = Checkpoint::open(dir.str());
  Detection det = detect_formats(*ck);
  EXPECT_TRUE(det.unsupported.empty());
  int quantized = 0, int4 = 0;
  for (const auto& t : det.tensors) {
    quantized += t.format == Format::fp8_block128;
    int4 += t.format == Format::int4;
  }
  const uint64_t moe_layers = dims.L - dims.K + dims.mtp;
  if (dims.fp8) {
    // 5 attention + 3 dense or 3 shared + 3 per expert, in every layer (MTP included).
    EXPECT_EQ(uint64_t(quantized), (dims.L + dims.mtp) * 5 + dims.K * 3 + moe_layers * (3 + 3 * dims.E));
    EXPECT_EQ(int4, 0);
  } else {
    EXPECT_EQ(uint64_t(int4), moe_layers * 3 * dims.E);
    EXPECT_EQ(quantized, 0);
  }
  const Plan plan = plan_model(*ck, det, host_cpu_device(2, 100.0), PlanOptions{});
  const Counted e = count(dims);
  EXPECT_EQ(plan.architecture, "DeepseekV3ForCausalLM");
  EXPECT_EQ(plan.params, e.params);
  EXPECT_EQ(plan.mtp_params, e.mtp_params);
  EXPECT_NEAR(double(plan.params) / 1e9, published_b, tolerance_b);
  EXPECT_EQ(plan.bytes_per_token, e.bytes_per_token);
  EXPECT_DOUBLE_EQ(plan.bound_tokens_per_s, 100e9 / double(e.bytes_per_token));
  // `nibble explain --json` prints the same numbers, the model as runnable,
  // and whether its MTP layer drafts.
  test::RunResult r = test::run_nibble({"explain", dir.str(), "--json", "--bandwidth", "100", "--threads", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["model"]["architecture"], "DeepseekV3ForCausalLM");
  EXPECT_EQ(j["model"]["params"].get<uint64_t>(), e.params);
  EXPECT_EQ(j["model"]["mtp_params"].get<uint64_t>(), e.mtp_params);
  EXPECT_EQ(j["bytes_per_token"].get<uint64_t>(), e.bytes_per_token);
  EXPECT_DOUBLE_EQ(j["bound_tokens_per_s"].get<double>(), 100e9 / double(e.bytes_per_token));
  EXPECT_EQ(j["runnable"], true);
  EXPECT_EQ(j["speculative"]["mtp_layer"], dims.mtp > 0);
  if (dims.mtp > 0) {
    // The MTP layer can draft (model/deepseek_v3_mtp.cpp): off by default,
    // and explain says how to turn it on.
    const std::string why = j["speculative"]["why"].get<std::string>();
    EXPECT_EQ(j["speculative"]["on"], false);
    EXPECT_NE(why.find("model.layers.{num_hidden_layers}"), std::string::npos) << why;
    EXPECT_NE(why.find("off by default"), std::string::npos) << why;
    EXPECT_NE(why.find("--spec-draft-tokens"), std::string::npos) << why;
  }
  std::printf("%s: %.3fB parameters (+%.3fB MTP), %.3f GB per token, bound %.2f tokens/s at 100 GB/s\n",
              which.c_str(), double(plan.params) / 1e9, double(plan.mtp_params) / 1e9,
              double(plan.bytes_per_token) / 1e9, plan.bound_tokens_per_s);
}

// deepseek-ai/DeepSeek-V3: "671B total parameters" (+ 14B in the MTP module).
TEST(Dsv3Skeleton, DeepSeekV3Fp8PlansItsParametersAndBytes) {
  check("deepseek_v3", {129280, 7168, 128, 61, 3, 256, 2048, 18432, 1536, 512, 128, 64, 128, 8, 1, true}, 671.0, 0.5);
}

// moonshotai/Kimi-K2-Thinking: "1T total parameters" (1.026T as counted here).
TEST(Dsv3Skeleton, KimiK2Int4PlansItsParametersAndBytes) {
  check("kimi_k2", {163840, 7168, 64, 61, 1, 384, 2048, 18432, 1536, 512, 128, 64, 128, 8, 0, false}, 1025.0, 25.0);
}

}  // namespace
}  // namespace nibble
