#include "model/deepseek_v3_weights.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "format/element.h"
#include "kernels/moe_routing.h"
#include "kernels/registry.h"
#include "model/deepseek_v3_layout.h"
#include "model/weight_binder.h"
#include "util/error.h"

namespace nibble {

namespace {

using Binder = WeightBinder;

// A matrix of any format dequantized to f32 [rows, cols] (kv_b_proj, read
// per head by the absorbed attention).
std::vector<float> dense_f32(const Binder& b, const std::string& base, int64_t rows, int64_t cols,
                             const std::string& why) {
  const WeightView w = weight_view(b.matrix(base, rows, cols, why));
  std::vector<float> out(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r) dequantize_row(w, r, out.data() + r * cols);
  return out;
}

Dsv3Mlp bind_mlp(const Binder& b, const std::string& p, int64_t D, int64_t W, const std::string& why) {
  Dsv3Mlp m;
  m.gate = b.linear(p + "gate_proj", W, D, why + " x hidden_size");
  m.up = b.linear(p + "up_proj", W, D, why + " x hidden_size");
  m.down = b.linear(p + "down_proj", D, W, "hidden_size x " + why);
  return m;
}

Dsv3Attention bind_attention(const Binder& b, const DeepseekV3Config& c, const std::string& a) {
  const int64_t D = c.hidden, H = c.n_heads, qk = c.qk_head_dim(), C = c.kv_lora_rank;
  Dsv3Attention w;
  if (c.q_lora_rank > 0) {
    w.q_a = b.linear(a + "q_a_proj", c.q_lora_rank, D, "q_lora_rank x hidden_size");
    w.q_a_norm = b.vec(a + "q_a_layernorm.weight", {c.q_lora_rank}, "q_lora_rank");
    w.q_b = b.linear(a + "q_b_proj", H * qk, c.q_lora_rank,
                     "num_attention_heads*(qk_nope_head_dim+qk_rope_head_dim) x q_lora_rank");
  } else {
    w.q = b.linear(a + "q_proj", H * qk, D, "q_lora_rank null: num_attention_heads*(qk_nope+qk_rope) x hidden_size");
  }
  w.kv_a = b.linear(a + "kv_a_proj_with_mqa", C + c.qk_rope, D, "kv_lora_rank+qk_rope_head_dim x hidden_size");
  w.kv_a_norm = b.vec(a + "kv_a_layernorm.weight", {C}, "kv_lora_rank");
  w.kv_b = dense_f32(b, a + "kv_b_proj", H * (c.qk_nope + c.v_head_dim), C,
                       "num_attention_heads*(qk_nope_head_dim+v_head_dim) x kv_lora_rank");
  w.o = b.linear(a + "o_proj", D, H * c.v_head_dim, "hidden_size x num_attention_heads*v_head_dim");
  return w;
}

Dsv3LayerWeights bind_layer(const Binder& b, const DeepseekV3Config& c, int64_t l) {
  const std::string p = "model.layers." + std::to_string(l) + ".";
  const int64_t D = c.hidden, E = c.n_experts, I = c.moe_inter;
  Dsv3LayerWeights w;
  w.attn_norm = b.vec(p + "input_layernorm.weight", {D}, "hidden_size");
  w.ffn_norm = b.vec(p + "post_attention_layernorm.weight", {D}, "hidden_size");
  w.attn = bind_attention(b, c, p + "self_attn.");
  const std::string m = p + "mlp.";
  w.dense = c.dense(l);
  if (w.dense) {
    w.mlp = bind_mlp(b, m, D, c.inter, "intermediate_size (layer < first_k_dense_replace)");
    return w;
  }
  w.router = b.linear(m + "gate", E, D, "n_routed_experts x hidden_size");
  w.router_bias = b.vec(m + "gate.e_score_correction_bias", {E}, "n_routed_experts");
  MoeWeights& moe = w.moe;
  moe.hidden = D;
  moe.inter = I;
  moe.n_experts = E;
  moe.top_k = c.top_k;
  moe.gate = w.router.w;
  moe.bias = w.router_bias.data();
  moe.n_group = c.n_group;
  moe.topk_group = c.topk_group;
  moe.scoring = ScoringFunc::sigmoid;
  moe.norm_topk_prob = c.norm_topk_prob;
  moe.routed_scaling = float(c.routed_scaling);
  const DetectedTensor* first = nullptr;
  for (int64_t e = 0; e < E; ++e) {
    const std::string x = m + "experts." + std::to_string(e) + ".";
    const DetectedTensor& g = b.matrix(x + "gate_proj", I, D, "moe_intermediate_size x hidden_size");
    const DetectedTensor& u = b.matrix(x + "up_proj", I, D, "moe_intermediate_size x hidden_size");
    const DetectedTensor& d = b.matrix(x + "down_proj", D, I, "hidden_size x moe_intermediate_size");
    if (!first) first = &g;
    for (const DetectedTensor* t : {&u, &d})
      if (t->format != first->format)
        fail(t->parts[0]->file, ": tensor ", t->parts[0]->name, " is ",
             format_name(t->format), " but the layer's first expert is ", format_name(first->format),
             "; one MoE kernel runs a layer's experts, so they must share a format");
    ExpertWeights ew;
    ew.w1 = weight_view(g);
    ew.w3 = weight_view(u);
    ew.w2 = weight_view(d);
    moe.experts.push_back(ew);
  }
  w.moe_fn = b.moe_kernel(*first);
  check_moe_weights(moe);
  if (c.n_shared > 0) {
    w.has_shared = true;
    w.shared = bind_mlp(b, m + "shared_experts.", D, c.n_shared * I, "n_shared_experts*moe_intermediate_size");
  }
  return w;
}

Dsv3MtpWeights bind_mtp(const Binder& b, const DeepseekV3Config& c, int64_t l, const Dsv3Weights& main) {
  const std::string p = "model.layers." + std::to_string(l) + ".";
  const int64_t D = c.hidden, V = c.vocab_size;
  Dsv3MtpWeights w;
  w.enorm = b.vec(p + "enorm.weight", {D}, "hidden_size (MTP layer, num_nextn_predict_layers)");
  w.hnorm = b.vec(p + "hnorm.weight", {D}, "hidden_size (MTP layer)");
  w.eh_proj = b.linear(p + "eh_proj", D, 2 * D, "MTP layer: hidden_size x 2*hidden_size");
  w.layer = bind_layer(b, c, l);
  w.head_norm = b.vec(p + "shared_head.norm.weight", {D}, "hidden_size (MTP layer)");
  w.head = b.has_matrix(p + "shared_head.head")
               ? b.linear(p + "shared_head.head", V, D, "MTP layer: vocab_size x hidden_size")
               : main.head;
  w.embed = b.has_matrix(p + "embed_tokens")
                ? weight_view(b.matrix(p + "embed_tokens", V, D, "MTP layer: vocab_size x hidden_size"))
                : main.embed;
  return w;
}

}  // namespace

Dsv3Weights bind_deepseek_v3_weights(const Checkpoint& ck, const Detection& det, const Plan& plan,
                                     const DeepseekV3Config& cfg, const LoadOptions& options) {
  const int64_t n_layers = cfg.n_layers;
  Binder b(ck, det, plan, options,
           [n_layers](const std::string& name, Format) { return deepseek_v3_tensor_group(name, n_layers); });
  Dsv3Weights w;
  const DetectedTensor& embed = b.matrix("model.embed_tokens", cfg.vocab_size, cfg.hidden, "vocab_size x hidden_size");
  w.embed = weight_view(embed);
  if (b.find("lm_head") || !cfg.tie_word_embeddings)
    w.head = b.linear("lm_head", cfg.vocab_size, cfg.hidden, "vocab_size x hidden_size");
  else
    w.head = BoundLinear{weight_view(embed), b.linear_kernel(embed)};
  w.norm = b.vec("model.norm.weight", {cfg.hidden}, "hidden_size");
  w.layers.reserve(size_t(cfg.n_layers));
  for (int64_t l = 0; l < cfg.n_layers; ++l) w.layers.push_back(bind_layer(b, cfg, l));
  for (int64_t k = 0; k < cfg.n_mtp_layers; ++k) w.mtp.push_back(bind_mtp(b, cfg, cfg.n_layers + k, w));
  b.finish_progress();
  return w;
}

}  // namespace nibble
