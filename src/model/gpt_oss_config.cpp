#include "model/gpt_oss_config.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "model/config_fields.h"
#include "util/error.h"

namespace nibble {

using nlohmann::json;

namespace {

// transformers' _compute_yarn_parameters: attention_factor (the cos/sin
// scale) defaults to 0.1 ln(factor) + 1, or the mscale ratio when both
// mscale and mscale_all_dim are given.
double yarn_mscale(double scale, double mscale) { return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

RopeConfig parse_rope(const json& d, const std::string& path, const std::string& prefix, double theta,
                      double max_pos) {
  ConfigFields r{d, path, prefix};
  RopeConfig c;
  c.theta = r.number("rope_theta", theta);
  const std::string type = r.string("rope_type", r.string("type", "default"));
  if (type == "yarn") {
    c.yarn = true;
    c.original_max_position = r.number("original_max_position_embeddings", 4096);
    c.factor = r.number("factor", max_pos / c.original_max_position);
    c.beta_fast = r.number("beta_fast", 32.0);
    if (c.beta_fast == 0) c.beta_fast = 32.0;  // HF: `beta_fast or 32`
    c.beta_slow = r.number("beta_slow", 1.0);
    if (c.beta_slow == 0) c.beta_slow = 1.0;
    c.truncate = r.boolean("truncate", true);
    if (c.factor <= 0 || c.original_max_position <= 0)
      fail(path, ": field \"", prefix, "factor\" / \"original_max_position_embeddings\" must be positive for yarn");
    const double ms = r.number("mscale", 0), ms_all = r.number("mscale_all_dim", 0);
    const double derived = ms != 0 && ms_all != 0 ? yarn_mscale(c.factor, ms) / yarn_mscale(c.factor, ms_all)
                                                  : yarn_mscale(c.factor, 1.0);
    c.attention_factor = r.number("attention_factor", derived);
  } else if (type == "default") {
    c.attention_factor = 1.0;
  } else {
    fail(path, ": field \"", prefix, "rope_type\" is \"", type, "\"; gpt-oss uses yarn (or default)");
  }
  if (!(c.theta > 1.0)) fail(path, ": field \"", prefix, "rope_theta\" must be > 1");
  return c;
}

}  // namespace

GptOssConfig parse_gpt_oss_config(const json& cfg, const std::string& path) {
  if (!cfg.is_object()) fail(path, ": not a JSON object");
  ConfigFields r{cfg, path, ""};
  GptOssConfig c;
  c.path = path;
  c.vocab_size = r.positive("vocab_size", c.vocab_size);
  c.hidden = r.positive("hidden_size", c.hidden);
  c.n_layers = r.positive("num_hidden_layers", c.n_layers);
  c.n_heads = r.positive("num_attention_heads", c.n_heads);
  c.n_kv_heads = r.positive("num_key_value_heads", c.n_heads);
  c.head_dim = r.positive("head_dim", c.hidden / c.n_heads);
  c.inter = r.positive("intermediate_size", c.inter);
  c.n_experts = r.positive("num_local_experts", c.n_experts);
  c.top_k = r.positive("num_experts_per_tok", r.positive("experts_per_token", c.top_k));
  c.sliding_window = r.positive("sliding_window", c.sliding_window);
  c.max_position = r.positive("max_position_embeddings", c.max_position);
  c.rms_eps = r.number("rms_norm_eps", c.rms_eps);
  c.swiglu_alpha = r.number("swiglu_alpha", c.swiglu_alpha);
  c.swiglu_limit = r.number("swiglu_limit", c.swiglu_limit);
  c.attention_bias = r.boolean("attention_bias", c.attention_bias);
  c.tie_word_embeddings = r.boolean("tie_word_embeddings", false);
  if (c.n_heads % c.n_kv_heads != 0)
    fail(path, ": num_attention_heads (", c.n_heads, ") is not a multiple of num_key_value_heads (", c.n_kv_heads, ")");
  if (c.head_dim % 2 != 0) fail(path, ": head_dim (", c.head_dim, ") must be even for RoPE");
  if (c.top_k > c.n_experts)
    fail(path, ": num_experts_per_tok (", c.top_k, ") exceeds num_local_experts (", c.n_experts, ")");
  if (!(c.rms_eps > 0)) fail(path, ": field \"rms_norm_eps\" must be positive");
  if (!(c.swiglu_alpha > 0)) fail(path, ": field \"swiglu_alpha\" must be positive");

  // RoPE: rope_parameters (transformers 5) or rope_theta + rope_scaling (as published).
  const double theta = r.number("rope_theta", 150000.0);
  const json yarn_default = {{"rope_type", "yarn"},   {"factor", 32.0},     {"beta_fast", 32.0},
                             {"beta_slow", 1.0},      {"truncate", false},  {"original_max_position_embeddings", 4096}};
  if (const json* rp = r.find("rope_parameters")) {
    if (!rp->is_object()) r.bad("rope_parameters", "an object");
    c.rope = parse_rope(*rp, path, "rope_parameters.", theta, double(c.max_position));
  } else if (const json* rs = r.find("rope_scaling")) {
    if (!rs->is_object()) r.bad("rope_scaling", "an object");
    c.rope = parse_rope(*rs, path, "rope_scaling.", theta, double(c.max_position));
  } else {
    c.rope = parse_rope(yarn_default, path, "", theta, double(c.max_position));
  }

  // layer_types: HF's default alternates sliding (even layers) and full.
  c.sliding.resize(size_t(c.n_layers));
  if (const json* lt = r.find("layer_types")) {
    if (!lt->is_array() || int64_t(lt->size()) != c.n_layers)
      fail(path, ": field \"layer_types\" must list num_hidden_layers (", c.n_layers, ") names");
    for (size_t i = 0; i < lt->size(); ++i) {
      const json& v = (*lt)[i];
      const std::string s = v.is_string() ? v.get<std::string>() : v.dump();
      if (s != "sliding_attention" && s != "full_attention")
        fail(path, ": field \"layer_types\"[", i, "] is ", s, "; gpt-oss uses sliding_attention or full_attention");
      c.sliding[i] = s == "sliding_attention";
    }
  } else {
    for (int64_t l = 0; l < c.n_layers; ++l) c.sliding[size_t(l)] = (l + 1) % 2 != 0;
  }

  c.bos_token_id = r.integer("bos_token_id", -1);
  if (const json* e = r.find("eos_token_id")) {
    if (e->is_number_integer()) c.eos_token_ids.push_back(e->get<int64_t>());
    else if (e->is_array())
      for (const auto& v : *e) {
        if (!v.is_number_integer()) r.bad("eos_token_id", "an integer or a list of integers");
        c.eos_token_ids.push_back(v.get<int64_t>());
      }
    else r.bad("eos_token_id", "an integer or a list of integers");
  }
  return c;
}

}  // namespace nibble
