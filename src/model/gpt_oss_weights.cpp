#include "model/gpt_oss_weights.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "format/element.h"
#include "kernels/moe_routing.h"
#include "kernels/registry.h"
#include "model/gpt_oss_layout.h"
#include "model/weight_binder.h"
#include "util/error.h"

namespace nibble {

namespace {

GptOssLayerWeights bind_layer(const WeightBinder& b, const GptOssConfig& c, int64_t l) {
  const std::string p = "model.layers." + std::to_string(l) + ".";
  const int64_t D = c.hidden, qw = c.n_heads * c.head_dim, kvw = c.n_kv_heads * c.head_dim;
  const int64_t E = c.n_experts, I = c.inter;
  GptOssLayerWeights w;
  w.sliding = c.sliding[size_t(l)];
  w.attn_norm = b.vec(p + "input_layernorm.weight", {D}, "hidden_size");
  w.ffn_norm = b.vec(p + "post_attention_layernorm.weight", {D}, "hidden_size");
  const std::string a = p + "self_attn.";
  w.q = b.linear(a + "q_proj", qw, D, "num_attention_heads*head_dim x hidden_size");
  w.k = b.linear(a + "k_proj", kvw, D, "num_key_value_heads*head_dim x hidden_size");
  w.v = b.linear(a + "v_proj", kvw, D, "num_key_value_heads*head_dim x hidden_size");
  w.o = b.linear(a + "o_proj", D, qw, "hidden_size x num_attention_heads*head_dim");
  if (c.attention_bias) {
    w.q_bias = b.vec(a + "q_proj.bias", {qw}, "attention_bias: num_attention_heads*head_dim");
    w.k_bias = b.vec(a + "k_proj.bias", {kvw}, "attention_bias: num_key_value_heads*head_dim");
    w.v_bias = b.vec(a + "v_proj.bias", {kvw}, "attention_bias: num_key_value_heads*head_dim");
    w.o_bias = b.vec(a + "o_proj.bias", {D}, "attention_bias: hidden_size");
  }
  w.sinks = b.vec(a + "sinks", {c.n_heads}, "num_attention_heads");

  const std::string m = p + "mlp.";
  w.router = b.linear(m + "router", E, D, "num_local_experts x hidden_size");
  w.router_bias = b.vec(m + "router.bias", {E}, "num_local_experts");
  const std::string x = m + "experts.";
  w.gate_up_bias = b.vec(x + "gate_up_proj_bias", {E, 2 * I}, "num_local_experts x 2*intermediate_size");
  w.down_bias = b.vec(x + "down_proj_bias", {E, D}, "num_local_experts x hidden_size");

  MoeWeights& moe = w.moe;
  moe.hidden = D;
  moe.inter = I;
  moe.n_experts = E;
  moe.top_k = c.top_k;
  moe.gate = w.router.w;
  moe.gate_bias = w.router_bias.data();
  moe.scoring = ScoringFunc::topk_softmax;
  moe.norm_topk_prob = false;
  moe.routed_scaling = 1.0f;
  moe.swiglu_limit = float(c.swiglu_limit);
  moe.swiglu_alpha = float(c.swiglu_alpha);
  // As published: two stacked MXFP4 matrices, expert e's rows bound as
  // zero-copy views. As `nibble convert --to nvfp4` writes them (ModelOpt's
  // per-expert form): x.E.gate_up_proj / x.E.down_proj, each its own matrix.
  // A layer holds one layout, every expert in one format.
  const bool stacked = b.find(x + "gate_up_proj") || b.find(x + "down_proj");
  if (stacked)
    for (int64_t e = 0; e < E; ++e)
      for (const char* proj : {"gate_up_proj", "down_proj"})
        if (const DetectedTensor* t = b.find(x + std::to_string(e) + "." + proj))
          fail(b.path(), ": layer ", l, " holds both stacked experts (", x, "gate_up_proj_blocks) and per-expert ones (",
               t->parts[0]->name, "); a layer's experts must be in one layout");
  const DetectedTensor* first = nullptr;
  if (stacked) {
    const DetectedTensor& gu = b.matrix(x + "gate_up_proj", E * 2 * I, D, "num_local_experts x 2*intermediate_size x hidden_size");
    const DetectedTensor& dn = b.matrix(x + "down_proj", E * D, I, "num_local_experts x hidden_size x intermediate_size");
    first = &gu;
    const WeightView guv = weight_view(gu), dnv = weight_view(dn);
    for (int64_t e = 0; e < E; ++e) {
      ExpertWeights ew;
      ew.w13 = *row_slice(guv, e * 2 * I, 2 * I);
      ew.w2 = *row_slice(dnv, e * D, D);
      ew.w13.name = gu.name + "[" + std::to_string(e) + "]";
      ew.w2.name = dn.name + "[" + std::to_string(e) + "]";
      moe.experts.push_back(ew);
    }
  } else {
    for (int64_t e = 0; e < E; ++e) {
      const std::string xe = x + std::to_string(e) + ".";
      const DetectedTensor& gu = b.matrix(xe + "gate_up_proj", 2 * I, D, "per expert: 2*intermediate_size x hidden_size");
      const DetectedTensor& dn = b.matrix(xe + "down_proj", D, I, "per expert: hidden_size x intermediate_size");
      if (!first) first = &gu;
      for (const DetectedTensor* t : {&gu, &dn})
        if (t->format != first->format)
          fail(b.path(), ": tensor ", t->parts[0]->name, " is ", format_name(t->format), " but ", first->parts[0]->name,
               " is ", format_name(first->format), "; a layer's experts must share one format");
      ExpertWeights ew;
      ew.w13 = weight_view(gu);
      ew.w2 = weight_view(dn);
      moe.experts.push_back(ew);
    }
  }
  for (int64_t e = 0; e < E; ++e) {
    moe.experts[size_t(e)].b13 = w.gate_up_bias.data() + e * 2 * I;
    moe.experts[size_t(e)].b2 = w.down_bias.data() + e * D;
  }
  w.moe_fn = b.moe_kernel(*first);
  check_moe_weights(moe);
  return w;
}

}  // namespace

GptOssWeights bind_gpt_oss_weights(const Checkpoint& ck, const Detection& det, const Plan& plan,
                                   const GptOssConfig& cfg, const LoadOptions& options) {
  WeightBinder b(ck, det, plan, options, gpt_oss_tensor_group);
  GptOssWeights w;
  const DetectedTensor& embed = b.matrix("model.embed_tokens", cfg.vocab_size, cfg.hidden, "vocab_size x hidden_size");
  w.embed = weight_view(embed);
  if (b.find("lm_head") || !cfg.tie_word_embeddings)
    w.head = b.linear("lm_head", cfg.vocab_size, cfg.hidden, "vocab_size x hidden_size");
  else
    w.head = BoundLinear{weight_view(embed), b.linear_kernel(embed)};
  w.norm = b.vec("model.norm.weight", {cfg.hidden}, "hidden_size");
  w.layers.reserve(size_t(cfg.n_layers));
  for (int64_t l = 0; l < cfg.n_layers; ++l) w.layers.push_back(bind_layer(b, cfg, l));
  b.finish_progress();
  return w;
}

}  // namespace nibble
