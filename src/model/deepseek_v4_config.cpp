#include "model/deepseek_v4_config.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "model/config_fields.h"
#include "util/error.h"

namespace nibble {

using nlohmann::json;

const char* attn_kind_name(AttnKind k) {
  switch (k) {
    case AttnKind::sliding: return "sliding_attention";
    case AttnKind::csa: return "compressed_sparse_attention";
    case AttnKind::hca: return "heavily_compressed_attention";
  }
  return "?";
}

int64_t DeepseekV4Config::compress_rate(AttnKind k) const {
  switch (k) {
    case AttnKind::sliding: return 0;
    case AttnKind::csa: return compress_rate_csa;
    case AttnKind::hca: return compress_rate_hca;
  }
  return 0;
}

namespace {

// One rope flavour from a (possibly partial) HF rope dict.
RopeConfig parse_rope(const json& d, const std::string& path, const std::string& prefix, double theta,
                      double max_pos) {
  ConfigFields f{d, path, prefix};
  RopeConfig r;
  r.theta = f.number("rope_theta", theta);
  std::string type = f.string("rope_type", f.string("type", "default"));
  if (type == "yarn") {
    r.yarn = true;
    r.original_max_position = f.number("original_max_position_embeddings", max_pos);
    r.factor = f.number("factor", r.original_max_position > 0 ? max_pos / r.original_max_position : 1.0);
    // `beta_fast or 32`: HF treats 0 like missing.
    r.beta_fast = f.number("beta_fast", 32.0);
    if (r.beta_fast == 0) r.beta_fast = 32.0;
    r.beta_slow = f.number("beta_slow", 1.0);
    if (r.beta_slow == 0) r.beta_slow = 1.0;
    r.truncate = f.boolean("truncate", true);
    // V4 does not scale cos/sin by YaRN's mscale: HF injects attention_factor 1.0.
    r.attention_factor = f.number("attention_factor", 1.0);
    if (r.factor <= 0 || r.original_max_position <= 0)
      fail(path, ": field \"", prefix, "factor\"/\"original_max_position_embeddings\" must be positive for yarn");
  } else if (type == "default") {
    r.attention_factor = 1.0;
  } else {
    fail(path, ": field \"", prefix, "rope_type\" is \"", type, "\"; DeepSeek-V4 uses default or yarn");
  }
  if (!(r.theta > 1.0)) fail(path, ": field \"", prefix, "rope_theta\" must be > 1");
  return r;
}

AttnKind layer_type_from_name(const std::string& s, const std::string& path, size_t i) {
  if (s == "sliding_attention") return AttnKind::sliding;
  if (s == "compressed_sparse_attention") return AttnKind::csa;
  if (s == "heavily_compressed_attention") return AttnKind::hca;
  fail(path, ": field \"layer_types\"[", i, "] is \"", s,
       "\"; expected sliding_attention, compressed_sparse_attention or heavily_compressed_attention");
}

}  // namespace

DeepseekV4Config parse_deepseek_v4_config(const json& cfg, const std::string& path) {
  if (!cfg.is_object()) fail(path, ": not a JSON object");
  ConfigFields f{cfg, path, ""};
  DeepseekV4Config c;
  c.path = path;

  c.vocab_size = f.positive("vocab_size", c.vocab_size);
  c.hidden = f.positive("hidden_size", c.hidden);
  c.n_layers = f.positive("num_hidden_layers", c.n_layers);
  c.n_heads = f.positive("num_attention_heads", c.n_heads);
  if (int64_t kv = f.integer("num_key_value_heads", 1); kv != 1)
    fail(path, ": field \"num_key_value_heads\" is ", kv, "; DeepSeek-V4 has one shared KV head");
  c.head_dim = f.positive("head_dim", c.head_dim);
  c.q_lora_rank = f.positive("q_lora_rank", c.q_lora_rank);
  c.o_groups = f.positive("o_groups", c.o_groups);
  c.o_lora_rank = f.positive("o_lora_rank", c.o_lora_rank);
  c.sliding_window = f.positive("sliding_window", c.sliding_window);

  // Partial RoPE: partial_rotary_factor (HF) or qk_rope_head_dim (official).
  if (f.find("partial_rotary_factor")) {
    double prf = f.number("partial_rotary_factor", 0.125);
    c.rope_dim = int64_t(double(c.head_dim) * prf);
  } else {
    c.rope_dim = f.integer("qk_rope_head_dim", c.head_dim / 8);
  }
  if (c.rope_dim <= 0 || c.rope_dim % 2 || c.rope_dim > c.head_dim)
    fail(path, ": the RoPE width (qk_rope_head_dim / partial_rotary_factor) is ", c.rope_dim,
         "; it must be even and in 2..head_dim (", c.head_dim, ")");

  // intermediate_size is HF's alias of moe_intermediate_size.
  c.moe_inter = f.positive("moe_intermediate_size", f.integer("intermediate_size", c.moe_inter));
  c.n_experts = f.positive("n_routed_experts", f.integer("num_local_experts", c.n_experts));
  c.n_shared_experts = f.integer("n_shared_experts", c.n_shared_experts);
  if (c.n_shared_experts != 0 && c.n_shared_experts != 1)
    fail(path, ": field \"n_shared_experts\" is ", c.n_shared_experts, "; nibble supports 0 or 1");
  c.top_k = f.positive("num_experts_per_tok", c.top_k);
  if (c.top_k > c.n_experts)
    fail(path, ": field \"num_experts_per_tok\" (", c.top_k, ") exceeds n_routed_experts (", c.n_experts, ")");
  const std::string scoring = f.string("scoring_func", "sqrtsoftplus");
  if (scoring == "sqrtsoftplus") c.scoring = ScoringFunc::sqrtsoftplus;
  else if (scoring == "sigmoid") c.scoring = ScoringFunc::sigmoid;
  else if (scoring == "softmax") c.scoring = ScoringFunc::softmax;
  else fail(path, ": field \"scoring_func\" is \"", scoring, "\"; expected sqrtsoftplus, sigmoid or softmax");
  c.norm_topk_prob = f.boolean("norm_topk_prob", true);
  c.routed_scaling = f.number("routed_scaling_factor", c.routed_scaling);
  c.swiglu_limit = f.number("swiglu_limit", c.swiglu_limit);
  if (const std::string act = f.string("hidden_act", "silu"); act != "silu")
    fail(path, ": field \"hidden_act\" is \"", act, "\"; DeepSeek-V4 uses silu");

  c.hc_mult = f.positive("hc_mult", c.hc_mult);
  c.hc_sinkhorn_iters = f.positive("hc_sinkhorn_iters", c.hc_sinkhorn_iters);
  c.hc_eps = f.number("hc_eps", c.hc_eps);
  c.rms_eps = f.number("rms_norm_eps", c.rms_eps);

  c.index_n_heads = f.positive("index_n_heads", c.index_n_heads);
  c.index_head_dim = f.positive("index_head_dim", c.index_head_dim);
  c.index_topk = f.positive("index_topk", c.index_topk);

  // Compression rates: compress_rates {type: rate} (HF) with legacy scalar overrides.
  if (const json* rates = f.find("compress_rates")) {
    if (!rates->is_object()) f.bad("compress_rates", "an object");
    ConfigFields rf{*rates, path, "compress_rates."};
    c.compress_rate_csa = rf.positive("compressed_sparse_attention", c.compress_rate_csa);
    c.compress_rate_hca = rf.positive("heavily_compressed_attention", c.compress_rate_hca);
  }
  c.compress_rate_csa = f.positive("compress_rate_csa", c.compress_rate_csa);
  c.compress_rate_hca = f.positive("compress_rate_hca", c.compress_rate_hca);

  // Layer schedule: layer_types > compress_ratios (0/4/128) > HF's V4-Pro default.
  // Written but null is a broken export, not "use the default": the default
  // schedule would then be reported as missing compressor tensors.
  for (const char* key : {"layer_types", "compress_ratios", "mlp_layer_types"})
    if (auto it = cfg.find(key); it != cfg.end() && it->is_null())
      fail(path, ": field \"", key, "\" is null; give the list, or leave the field out for the default");
  if (const json* lt = f.find("layer_types")) {
    if (!lt->is_array()) f.bad("layer_types", "a list");
    for (size_t i = 0; i < lt->size(); ++i) {
      if (!(*lt)[i].is_string()) fail(path, ": field \"layer_types\"[", i, "] must be a string");
      c.layer_types.push_back(layer_type_from_name((*lt)[i].get<std::string>(), path, i));
    }
  } else if (const json* cr = f.find("compress_ratios")) {
    if (!cr->is_array()) f.bad("compress_ratios", "a list of 0, 4 or 128");
    for (size_t i = 0; i < cr->size(); ++i) {
      const json& v = (*cr)[i];
      int64_t r = v.is_number_integer() ? v.get<int64_t>() : -1;
      if (r == 0) c.layer_types.push_back(AttnKind::sliding);
      else if (r == 4) c.layer_types.push_back(AttnKind::csa);
      else if (r == 128) c.layer_types.push_back(AttnKind::hca);
      else fail(path, ": field \"compress_ratios\"[", i, "] is ", v.dump(), "; expected 0, 4 or 128");
    }
  } else {
    // HF's V4-Pro default: two HCA layers, then CSA on odd and HCA on even layers.
    for (int64_t i = 0; i < c.n_layers; ++i)
      c.layer_types.push_back(i >= 2 && i % 2 ? AttnKind::csa : AttnKind::hca);
  }
  // compress_ratios also lists the MTP layers: only the first n_layers describe the backbone.
  if (int64_t(c.layer_types.size()) < c.n_layers)
    fail(path, ": the layer schedule (layer_types / compress_ratios) has ", c.layer_types.size(),
         " entries for num_hidden_layers = ", c.n_layers);
  c.layer_types.resize(size_t(c.n_layers));

  // MoE schedule: mlp_layer_types > num_hash_layers (default 3).
  if (const json* mt = f.find("mlp_layer_types")) {
    if (!mt->is_array()) f.bad("mlp_layer_types", "a list");
    for (size_t i = 0; i < mt->size(); ++i) {
      const json& v = (*mt)[i];
      std::string s = v.is_string() ? v.get<std::string>() : "";
      if (s != "hash_moe" && s != "moe")
        fail(path, ": field \"mlp_layer_types\"[", i, "] is ", v.dump(), "; expected hash_moe or moe");
      c.hash_moe.push_back(s == "hash_moe");
    }
    if (int64_t(c.hash_moe.size()) < c.n_layers)
      fail(path, ": field \"mlp_layer_types\" has ", c.hash_moe.size(), " entries for ", c.n_layers, " layers");
    c.hash_moe.resize(size_t(c.n_layers));
  } else {
    int64_t n_hash = f.integer("num_hash_layers", 3);
    if (n_hash < 0) fail(path, ": field \"num_hash_layers\" must be >= 0");
    for (int64_t i = 0; i < c.n_layers; ++i) c.hash_moe.push_back(i < n_hash);
  }
  c.n_mtp_layers = f.integer("num_nextn_predict_layers", c.n_mtp_layers);
  if (c.n_mtp_layers < 0) fail(path, ": field \"num_nextn_predict_layers\" must be >= 0");

  // RoPE: nested rope_parameters {main, compress} (HF) or a flat dict /
  // legacy rope_scaling whose YaRN keys apply to the compressed layers only.
  const double max_pos = f.number("max_position_embeddings", 1048576.0);
  if (!(max_pos >= 1) || max_pos > 9.0e15 || max_pos != std::floor(max_pos))
    f.bad("max_position_embeddings", "a positive integer");
  c.max_position = int64_t(max_pos);
  const double theta_main = f.number("rope_theta", 10000.0);
  const double theta_comp = f.number("compress_rope_theta", 160000.0);
  const json* rp = f.find("rope_parameters");
  if (rp && !rp->is_object()) f.bad("rope_parameters", "an object");
  if (rp && rp->contains("main") && rp->contains("compress") && (*rp)["main"].is_object() &&
      (*rp)["compress"].is_object()) {
    c.rope_main = parse_rope((*rp)["main"], path, "rope_parameters.main.", theta_main, max_pos);
    c.rope_compress = parse_rope((*rp)["compress"], path, "rope_parameters.compress.", theta_comp, max_pos);
  } else {
    json flat = json::object();
    std::string src = "rope_parameters.";
    if (rp) flat = *rp;
    else if (const json* rs = f.find("rope_scaling")) {
      if (!rs->is_object()) f.bad("rope_scaling", "an object");
      flat = *rs;
      src = "rope_scaling.";
    }
    flat.erase("main");
    flat.erase("compress");
    flat["rope_theta"] = theta_comp;
    c.rope_compress = parse_rope(flat, path, src, theta_comp, max_pos);
    c.rope_main = parse_rope(json{{"rope_type", "default"}}, path, "", theta_main, max_pos);
  }

  c.tie_word_embeddings = f.boolean("tie_word_embeddings", false);
  c.bos_token_id = f.integer("bos_token_id", 0);
  if (const json* eos = f.find("eos_token_id")) {
    c.eos_token_ids.clear();
    if (eos->is_number_integer()) c.eos_token_ids.push_back(eos->get<int64_t>());
    else if (eos->is_array()) {
      for (const auto& e : *eos) {
        if (!e.is_number_integer()) f.bad("eos_token_id", "an integer or a list of integers");
        c.eos_token_ids.push_back(e.get<int64_t>());
      }
    } else {
      f.bad("eos_token_id", "an integer or a list of integers");
    }
  }

  // Special tokens must be ids of the vocabulary: an EOS outside it would
  // never stop generation, a negative BOS would silently drop BOS.
  if (c.bos_token_id < 0 || c.bos_token_id >= c.vocab_size)
    fail(path, ": field \"bos_token_id\" is ", c.bos_token_id, "; it must be a token id in [0, vocab_size = ",
         c.vocab_size, ")");
  for (int64_t e : c.eos_token_ids)
    if (e < 0 || e >= c.vocab_size)
      fail(path, ": field \"eos_token_id\" holds ", e, "; it must be a token id in [0, vocab_size = ", c.vocab_size,
           ")");

  // Shape relations the forward pass relies on.
  if ((c.n_heads * c.head_dim) % c.o_groups)
    fail(path, ": num_attention_heads * head_dim (", c.n_heads * c.head_dim, ") is not divisible by o_groups (",
         c.o_groups, ")");
  for (int64_t i = 0; i < c.n_layers; ++i) {
    if (c.layer_types[size_t(i)] == AttnKind::csa && c.rope_dim > c.index_head_dim)
      fail(path, ": index_head_dim (", c.index_head_dim, ") is smaller than the RoPE width (", c.rope_dim, ")");
  }
  if (c.hc_eps < 0 || c.rms_eps < 0) fail(path, ": fields \"hc_eps\" / \"rms_norm_eps\" must be >= 0");
  return c;
}

}  // namespace nibble
