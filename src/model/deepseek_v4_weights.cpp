#include "model/deepseek_v4_weights.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

#include "format/element.h"
#include "kernels/moe_routing.h"
#include "kernels/registry.h"
#include "model/deepseek_v4_layout.h"
#include "model/weight_binder.h"
#include "util/error.h"

namespace nibble {

namespace {

// DeepSeek-V4's binder: the shared one, plus the config and the hash-routing table.
class Binder : public WeightBinder {
 public:
  Binder(const Checkpoint& ck, const Detection& det, const Plan& plan, const DeepseekV4Config& cfg,
         const LoadOptions& options)
      : WeightBinder(ck, det, plan, options, deepseek_v4_tensor_group), cfg_(cfg) {}

  const DeepseekV4Config& cfg() const { return cfg_; }

  // tid2eid [vocab, top_k] (I64 or I32) as i64, every entry a valid expert.
  std::vector<int64_t> tid2eid(const std::string& name, const std::string& why) const {
    const DetectedTensor* t = find(name);
    if (!t) fail(path(), ": tensor ", name, " is missing (", why, ")");
    const TensorInfo& ti = *t->parts[0];
    if (ti.shape != std::vector<int64_t>{cfg_.vocab_size, cfg_.top_k})
      fail(path(), ": tensor ", name, " has shape ", ti.shape_str(), " but config.json implies ",
           shape_str({cfg_.vocab_size, cfg_.top_k}), " (vocab_size x num_experts_per_tok)");
    if (ti.dtype != DType::I64 && ti.dtype != DType::I32)
      fail(path(), ": tensor ", name, " has dtype ", dtype_name(ti.dtype), "; expected I64 or I32");
    std::vector<int64_t> out(size_t(ti.numel()));
    for (size_t i = 0; i < out.size(); ++i) {
      if (ti.dtype == DType::I64) std::memcpy(&out[i], ti.data + i * 8, 8);
      else {
        int32_t v;
        std::memcpy(&v, ti.data + i * 4, 4);
        out[i] = v;
      }
      if (out[i] < 0 || out[i] >= cfg_.n_experts)
        fail(path(), ": tensor ", name, " row ", int64_t(i) / cfg_.top_k, " names expert ", out[i],
             " but n_routed_experts = ", cfg_.n_experts);
    }
    return out;
  }

 private:
  const DeepseekV4Config& cfg_;
};

HcWeights bind_hc(const Binder& b, const std::string& prefix, const char* which) {
  const auto& c = b.cfg();
  const int64_t N = c.hc_mult, width = (2 + N) * N;
  const std::string why = "hc_mult x hidden_size";
  HcWeights h;
  h.fn = b.f32_linear(prefix + "hc_" + which + "_fn", width, N * c.hidden, why);
  h.base = b.vec(prefix + "hc_" + which + "_base", width, "(2 + hc_mult) * hc_mult");
  h.scale = b.vec(prefix + "hc_" + which + "_scale", 3, "pre, post, comb scales");
  return h;
}

HcHeadWeights bind_hc_head(const Binder& b, const std::string& prefix) {
  const auto& c = b.cfg();
  HcHeadWeights h;
  h.fn = b.f32_linear(prefix + "hc_head_fn", c.hc_mult, c.hc_mult * c.hidden, "hc_mult x hc_mult*hidden_size");
  h.base = b.vec(prefix + "hc_head_base", c.hc_mult, "hc_mult");
  h.scale = b.vec(prefix + "hc_head_scale", 1, "one scale");
  return h;
}

CompressorWeights bind_compressor(const Binder& b, const std::string& prefix, int64_t ratio, int64_t dim,
                                  bool overlap) {
  const auto& c = b.cfg();
  CompressorWeights w;
  w.ratio = ratio;
  w.dim = dim;
  w.overlap = overlap;
  const int64_t width = w.width();
  const std::string why = std::string(overlap ? "compressed_sparse_attention layer: 2*" : "heavily_compressed_attention layer: ") +
                          (prefix.find("indexer") != std::string::npos ? "index_head_dim" : "head_dim") + " x hidden_size";
  w.wkv = b.linear(prefix + "wkv", width, c.hidden, why);
  w.wgate = b.linear(prefix + "wgate", width, c.hidden, why);
  w.ape = b.vec(prefix + "ape", {ratio, width}, "compress ratio x compressor width");
  w.norm = b.vec(prefix + "norm.weight", dim, "compressor entry width");
  return w;
}

AttentionWeights bind_attention(const Binder& b, const std::string& p, AttnKind kind) {
  const auto& c = b.cfg();
  const int64_t H = c.n_heads, d = c.head_dim, D = c.hidden;
  AttentionWeights a;
  a.kind = kind;
  a.wq_a = b.linear(p + "attn.wq_a", c.q_lora_rank, D, "q_lora_rank x hidden_size");
  a.q_norm = b.vec(p + "attn.q_norm.weight", c.q_lora_rank, "q_lora_rank");
  a.wq_b = b.linear(p + "attn.wq_b", H * d, c.q_lora_rank, "num_attention_heads*head_dim x q_lora_rank");
  a.wkv = b.linear(p + "attn.wkv", d, D, "head_dim x hidden_size");
  a.kv_norm = b.vec(p + "attn.kv_norm.weight", d, "head_dim");
  a.wo_a = b.linear(p + "attn.wo_a", c.o_groups * c.o_lora_rank, H * d / c.o_groups,
                    "o_groups*o_lora_rank x num_attention_heads*head_dim/o_groups");
  a.wo_b = b.linear(p + "attn.wo_b", D, c.o_groups * c.o_lora_rank, "hidden_size x o_groups*o_lora_rank");
  a.sink = b.vec(p + "attn.attn_sink", H, "num_attention_heads");
  if (kind == AttnKind::hca) {
    a.compressor = bind_compressor(b, p + "attn.compressor.", c.compress_rate_hca, d, false);
  } else if (kind == AttnKind::csa) {
    a.compressor = bind_compressor(b, p + "attn.compressor.", c.compress_rate_csa, d, true);
    IndexerWeights ix;
    ix.heads = c.index_n_heads;
    ix.dim = c.index_head_dim;
    ix.topk = c.index_topk;
    ix.wq_b = b.linear(p + "attn.indexer.wq_b", c.index_n_heads * c.index_head_dim, c.q_lora_rank,
                       "index_n_heads*index_head_dim x q_lora_rank");
    ix.weights_proj = b.linear(p + "attn.indexer.weights_proj", c.index_n_heads, D, "index_n_heads x hidden_size");
    ix.compressor = bind_compressor(b, p + "attn.indexer.compressor.", c.compress_rate_csa, c.index_head_dim, true);
    a.indexer = std::move(ix);
  }
  return a;
}

ExpertWeights bind_expert(const Binder& b, const std::string& p) {
  const auto& c = b.cfg();
  ExpertWeights e;
  e.w1 = weight_view(b.matrix(p + "w1", c.moe_inter, c.hidden, "moe_intermediate_size x hidden_size"));
  e.w3 = weight_view(b.matrix(p + "w3", c.moe_inter, c.hidden, "moe_intermediate_size x hidden_size"));
  e.w2 = weight_view(b.matrix(p + "w2", c.hidden, c.moe_inter, "hidden_size x moe_intermediate_size"));
  return e;
}

// `hash`: routed by tid2eid (else score + bias).
BlockWeights bind_block(const Binder& b, const std::string& p, AttnKind kind, bool hash) {
  const auto& c = b.cfg();
  BlockWeights w;
  w.attn_norm = b.vec(p + "attn_norm.weight", c.hidden, "hidden_size");
  w.ffn_norm = b.vec(p + "ffn_norm.weight", c.hidden, "hidden_size");
  w.hc_attn = bind_hc(b, p, "attn");
  w.hc_ffn = bind_hc(b, p, "ffn");
  w.attn = bind_attention(b, p, kind);

  MoeWeights& m = w.moe;
  m.hidden = c.hidden;
  m.inter = c.moe_inter;
  m.n_experts = c.n_experts;
  m.top_k = c.top_k;
  w.router = b.linear(p + "ffn.gate", c.n_experts, c.hidden, "n_routed_experts x hidden_size");
  m.gate = w.router.w;
  if (hash) w.tid2eid = b.tid2eid(p + "ffn.gate.tid2eid", "hash-routed layer (num_hash_layers / mlp_layer_types)");
  else w.gate_bias = b.vec(p + "ffn.gate.bias", c.n_experts, "score-routed layer: n_routed_experts");
  m.scoring = c.scoring;
  // HF's V4 routers (and the official Gate) renormalise the selected weights
  // for every non-softmax scoring function, whatever norm_topk_prob says.
  m.norm_topk_prob = c.scoring == ScoringFunc::softmax ? c.norm_topk_prob : true;
  m.routed_scaling = float(c.routed_scaling);
  m.swiglu_limit = float(c.swiglu_limit);
  for (int64_t e = 0; e < c.n_experts; ++e) m.experts.push_back(bind_expert(b, p + "ffn.experts." + std::to_string(e) + "."));
  const std::string shared = p + "ffn.shared_experts.";
  m.has_shared = c.n_shared_experts > 0;
  if (m.has_shared) m.shared = bind_expert(b, shared);
  w.moe_fn = b.moe_kernel(*b.find(p + "ffn.experts.0.w1"));
  // The MoE view points into the block's own vectors; BlockWeights is
  // move-only, and a moved vector keeps its buffer, so these stay valid.
  m.bias = w.gate_bias.empty() ? nullptr : w.gate_bias.data();
  m.tid2eid = w.tid2eid.empty() ? nullptr : w.tid2eid.data();
  m.tid2eid_is_i64 = true;
  m.tid2eid_rows = w.tid2eid.empty() ? 0 : c.vocab_size;
  check_moe_weights(m);  // once here, not per call
  return w;
}

}  // namespace

DeepseekV4Weights bind_deepseek_v4_weights(const Checkpoint& ck, const Detection& det, const Plan& plan,
                                           const DeepseekV4Config& cfg, const LoadOptions& options) {
  Binder b(ck, det, plan, cfg, options);
  DeepseekV4Weights w;
  const DetectedTensor& embed = b.matrix("embed", cfg.vocab_size, cfg.hidden, "vocab_size x hidden_size");
  w.embed = weight_view(embed);
  if (b.has_matrix("head") || !cfg.tie_word_embeddings) {
    w.head = b.linear("head", cfg.vocab_size, cfg.hidden, "vocab_size x hidden_size");
  } else {
    w.head = BoundLinear{weight_view(embed), b.linear_kernel(embed)};
  }
  w.norm = b.vec("norm.weight", cfg.hidden, "hidden_size");
  w.hc_head = bind_hc_head(b, "");

  w.layers.reserve(size_t(cfg.n_layers));
  for (int64_t i = 0; i < cfg.n_layers; ++i)
    w.layers.push_back(bind_block(b, "layers." + std::to_string(i) + ".", cfg.layer_types[size_t(i)],
                                  cfg.hash_moe[size_t(i)]));

  // The MTP layers are optional: re-packaged checkpoints drop them (HF
  // ignores them). A set that is absent, partial or of the wrong shape leaves
  // the model without a draft layer, with the reason kept.
  if (cfg.n_mtp_layers == 0) w.mtp_missing = ck.file_path("config.json") + ": num_nextn_predict_layers is 0";
  for (int64_t k = 0; k < cfg.n_mtp_layers && w.mtp_missing.empty(); ++k) {
    const std::string p = "mtp." + std::to_string(k) + ".";
    if (!b.has_prefix(p)) {
      w.mtp_missing = ck.path() + ": the checkpoint has no " + p + "* tensors (num_nextn_predict_layers = " +
                      std::to_string(cfg.n_mtp_layers) + ")";
      break;
    }
    try {
      MtpWeights m;
      // The MTP block is a sliding-window, score-routed layer (hash-routed if it ships tid2eid).
      m.block = bind_block(b, p, AttnKind::sliding, b.find(p + "ffn.gate.tid2eid") != nullptr);
      m.e_proj = b.linear(p + "e_proj", cfg.hidden, cfg.hidden, "hidden_size x hidden_size");
      m.h_proj = b.linear(p + "h_proj", cfg.hidden, cfg.hidden, "hidden_size x hidden_size");
      m.enorm = b.vec(p + "enorm.weight", cfg.hidden, "hidden_size");
      m.hnorm = b.vec(p + "hnorm.weight", cfg.hidden, "hidden_size");
      m.norm = b.vec(p + "norm.weight", cfg.hidden, "hidden_size");
      m.hc_head = bind_hc_head(b, p);
      w.mtp.push_back(std::move(m));
    } catch (const Error& e) {
      w.mtp_missing = e.what();
    }
  }
  if (!w.mtp_missing.empty()) w.mtp.clear();
  b.finish_progress();
  return w;
}

}  // namespace nibble
