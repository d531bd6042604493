#include "model/deepseek_v3_config.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "model/config_fields.h"
#include "util/error.h"

namespace nibble {

using nlohmann::json;

namespace {

using Reader = ConfigFields;

// transformers' yarn_get_mscale (modeling_deepseek_v3.py and
// _compute_yarn_parameters): 0.1 * mscale * ln(scale) + 1 above scale 1.
double yarn_mscale(double scale, double mscale) { return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

// The RoPE dict (rope_parameters or the published rope_scaling) and the
// softmax scale it implies. transformers' _compute_yarn_parameters gives the
// cos/sin factor (attention_factor, else mscale(f, mscale) / mscale(f,
// mscale_all_dim) when both are set, else mscale(f, 1)); DeepseekV3Attention
// multiplies head_dim^-0.5 by mscale(f, mscale_all_dim)^2 when
// mscale_all_dim is set (and nonzero) on any non-default rope_type.
void parse_rope(const json* d, const std::string& path, const std::string& prefix, double theta, double max_pos,
                double original_max_pos, DeepseekV3Config& c) {
  static const json empty = json::object();
  Reader r{d ? *d : empty, path, prefix};
  RopeConfig& rc = c.rope;
  rc.theta = r.number("rope_theta", theta);
  const std::string type = r.string("rope_type", r.string("type", "default"));
  c.softmax_scale = 1.0 / std::sqrt(double(c.qk_head_dim()));
  if (type == "yarn") {
    rc.yarn = true;
    rc.original_max_position = r.number("original_max_position_embeddings", original_max_pos);
    if (!(rc.original_max_position > 0)) r.bad("original_max_position_embeddings", "positive");
    if (!r.find("factor")) r.bad("factor", "set for yarn (transformers reads rope_parameters[\"factor\"])");
    rc.factor = r.number("factor", max_pos / rc.original_max_position);
    if (!(rc.factor > 0)) r.bad("factor", "positive");
    rc.beta_fast = r.number("beta_fast", 32.0);
    if (rc.beta_fast == 0) rc.beta_fast = 32.0;  // HF: `beta_fast or 32`
    rc.beta_slow = r.number("beta_slow", 1.0);
    if (rc.beta_slow == 0) rc.beta_slow = 1.0;
    rc.truncate = r.boolean("truncate", true);
    const double ms = r.number("mscale", 0), ms_all = r.number("mscale_all_dim", 0);
    const double derived = ms != 0 && ms_all != 0 ? yarn_mscale(rc.factor, ms) / yarn_mscale(rc.factor, ms_all)
                                                  : yarn_mscale(rc.factor, 1.0);
    rc.attention_factor = r.number("attention_factor", derived);
    if (ms_all != 0) {
      const double m = yarn_mscale(rc.factor, ms_all);
      c.softmax_scale = c.softmax_scale * m * m;
    }
  } else if (type == "default") {
    rc.attention_factor = 1.0;
  } else {
    fail(path, ": field \"", prefix, "rope_type\" is \"", type, "\"; nibble runs DeepSeek-V3 with yarn or default");
  }
  if (!(rc.theta > 1.0)) fail(path, ": field \"", prefix, "rope_theta\" must be > 1");
}

}  // namespace

DeepseekV3Config parse_deepseek_v3_config(const json& cfg, const std::string& path) {
  if (!cfg.is_object()) fail(path, ": not a JSON object");
  Reader r{cfg, path, ""};
  DeepseekV3Config c;
  c.path = path;
  c.model_type = r.string("model_type", c.model_type);
  if (c.model_type != "deepseek_v3" && c.model_type != "kimi_k2")
    fail(path, ": field \"model_type\" is \"", c.model_type, "\"; DeepseekV3ForCausalLM is deepseek_v3 or kimi_k2");
  c.vocab_size = r.positive("vocab_size", c.vocab_size);
  c.hidden = r.positive("hidden_size", c.hidden);
  c.n_layers = r.positive("num_hidden_layers", c.n_layers);
  c.inter = r.positive("intermediate_size", c.inter);
  c.moe_inter = r.positive("moe_intermediate_size", c.moe_inter);
  c.first_k_dense = r.integer("first_k_dense_replace", c.first_k_dense);
  if (c.first_k_dense < 0 || c.first_k_dense > c.n_layers)
    fail(path, ": field \"first_k_dense_replace\" is ", c.first_k_dense, "; must be in [0, num_hidden_layers = ",
         c.n_layers, "]");

  c.n_heads = r.positive("num_attention_heads", c.n_heads);
  const int64_t kv_heads = r.positive("num_key_value_heads", c.n_heads);
  if (kv_heads != c.n_heads)
    fail(path, ": num_key_value_heads (", kv_heads, ") differs from num_attention_heads (", c.n_heads,
         "); MLA expands every head from the latent, so the two must agree");
  c.q_lora_rank = r.find("q_lora_rank") ? r.positive("q_lora_rank", 0) : (cfg.contains("q_lora_rank") ? 0 : c.q_lora_rank);
  c.kv_lora_rank = r.positive("kv_lora_rank", c.kv_lora_rank);
  c.qk_nope = r.positive("qk_nope_head_dim", c.qk_nope);
  c.qk_rope = r.positive("qk_rope_head_dim", c.qk_rope);
  c.v_head_dim = r.positive("v_head_dim", c.v_head_dim);
  if (c.qk_rope % 2 != 0) fail(path, ": field \"qk_rope_head_dim\" (", c.qk_rope, ") must be even for RoPE pairs");
  if (!r.boolean("rope_interleave", true))
    fail(path, ": field \"rope_interleave\" is false; nibble runs DeepSeek-V3's interleaved RoPE layout (as published)");
  if (r.boolean("attention_bias", false))
    fail(path, ": field \"attention_bias\" is true; DeepSeek-V3 checkpoints have no attention biases and nibble runs none");

  c.n_experts = r.positive("n_routed_experts", r.positive("num_local_experts", c.n_experts));
  c.n_shared = r.integer("n_shared_experts", c.n_shared);
  if (c.n_shared < 0) fail(path, ": field \"n_shared_experts\" must not be negative, got ", c.n_shared);
  c.top_k = r.positive("num_experts_per_tok", c.top_k);
  c.n_group = r.positive("n_group", c.n_group);
  c.topk_group = r.positive("topk_group", c.topk_group);
  c.norm_topk_prob = r.boolean("norm_topk_prob", c.norm_topk_prob);
  c.routed_scaling = r.number("routed_scaling_factor", c.routed_scaling);
  if (c.first_k_dense < c.n_layers) {
    if (c.n_experts % c.n_group != 0)
      fail(path, ": n_routed_experts (", c.n_experts, ") is not a multiple of n_group (", c.n_group, ")");
    if (c.n_experts / c.n_group < 2)
      fail(path, ": n_routed_experts / n_group = ", c.n_experts / c.n_group,
           "; a group's score is the sum of its top 2 experts, so groups need at least 2");
    if (c.topk_group > c.n_group)
      fail(path, ": topk_group (", c.topk_group, ") exceeds n_group (", c.n_group, ")");
    if (c.top_k > c.topk_group * (c.n_experts / c.n_group))
      fail(path, ": num_experts_per_tok (", c.top_k, ") exceeds the experts of topk_group (", c.topk_group,
           ") groups of ", c.n_experts / c.n_group);
  }
  // The published configs spell out choices transformers hard-codes; any
  // other value would be a different model.
  if (const std::string s = r.string("scoring_func", "sigmoid"); s != "sigmoid")
    fail(path, ": field \"scoring_func\" is \"", s, "\"; DeepSeek-V3 routes with sigmoid");
  if (const std::string s = r.string("topk_method", "noaux_tc"); s != "noaux_tc")
    fail(path, ": field \"topk_method\" is \"", s, "\"; DeepSeek-V3 selects with noaux_tc (group-limited, bias-corrected)");
  if (const std::string s = r.string("hidden_act", "silu"); s != "silu")
    fail(path, ": field \"hidden_act\" is \"", s, "\"; nibble runs DeepSeek-V3's silu");
  if (const int64_t f = r.integer("moe_layer_freq", 1); f != 1)
    fail(path, ": field \"moe_layer_freq\" is ", f, "; every layer from first_k_dense_replace on is MoE (1)");

  c.max_position = r.positive("max_position_embeddings", c.max_position);
  c.rms_eps = r.number("rms_norm_eps", c.rms_eps);
  if (!(c.rms_eps > 0)) fail(path, ": field \"rms_norm_eps\" must be positive");
  c.n_mtp_layers = r.integer("num_nextn_predict_layers", r.integer("num_mtp_layers", 0));
  if (c.n_mtp_layers < 0) fail(path, ": field \"num_nextn_predict_layers\" must not be negative");
  c.tie_word_embeddings = r.boolean("tie_word_embeddings", false);

  const double theta = r.number("rope_theta", 10000.0);
  const double orig = r.number("original_max_position_embeddings", double(c.max_position));
  if (const json* rp = r.find("rope_parameters")) {
    if (!rp->is_object()) r.bad("rope_parameters", "an object");
    parse_rope(rp, path, "rope_parameters.", theta, double(c.max_position), orig, c);
  } else if (const json* rs = r.find("rope_scaling")) {
    if (!rs->is_object()) r.bad("rope_scaling", "an object");
    parse_rope(rs, path, "rope_scaling.", theta, double(c.max_position), orig, c);
  } else {
    parse_rope(nullptr, path, "", theta, double(c.max_position), orig, c);
  }

  c.bos_token_id = r.integer("bos_token_id", -1);
  c.eos_token_ids.clear();
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
