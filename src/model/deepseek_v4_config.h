// DeepSeek-V4 hyper-parameters, parsed from config.json in either spelling:
// DeepSeek's official fields (compress_ratios, num_hash_layers,
// qk_rope_head_dim, rope_scaling) or Hugging Face's (layer_types,
// mlp_layer_types, compress_rates, partial_rotary_factor, nested
// rope_parameters {main, compress}). Missing fields take HF's
// DeepseekV4Config defaults, which are the V4-Flash values (dsv4.md §1.3).
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "kernels/moe.h"

namespace nibble {

enum class AttnKind {
  sliding,  // window only (compress ratio 0)
  csa,      // window + compressed entries chosen by the Lightning Indexer (ratio 4)
  hca,      // window + every visible compressed entry (ratio 128)
};
const char* attn_kind_name(AttnKind k);  // HF's layer_types spelling

// One RoPE flavour (HF rope_parameters["main"] or ["compress"]).
struct RopeConfig {
  double theta = 10000.0;
  bool yarn = false;                    // rope_type "yarn"
  double factor = 1.0;                  // yarn only
  double original_max_position = 0;     // yarn only
  double beta_fast = 32.0, beta_slow = 1.0;
  bool truncate = true;                 // floor/ceil the YaRN correction range
  double attention_factor = 1.0;        // multiplies cos/sin (V4 forces 1.0)
};

struct DeepseekV4Config {
  std::string path;  // config.json, for messages

  int64_t vocab_size = 129280;
  int64_t hidden = 4096;                // D
  int64_t n_layers = 43;
  int64_t n_heads = 64;                 // H (query heads; one shared KV head)
  int64_t head_dim = 512;               // d
  int64_t rope_dim = 64;                // trailing RoPE'd channels of each head
  int64_t q_lora_rank = 1024;
  int64_t o_groups = 8;
  int64_t o_lora_rank = 1024;
  int64_t sliding_window = 128;
  int64_t max_position = 1048576;       // max_position_embeddings: the context length

  int64_t moe_inter = 2048;             // expert and shared-expert width
  int64_t n_experts = 256;
  int64_t n_shared_experts = 1;
  int64_t top_k = 6;
  ScoringFunc scoring = ScoringFunc::sqrtsoftplus;
  bool norm_topk_prob = true;
  double routed_scaling = 1.5;
  double swiglu_limit = 10.0;

  int64_t hc_mult = 4;                  // N residual streams
  int64_t hc_sinkhorn_iters = 20;
  double hc_eps = 1e-6;
  double rms_eps = 1e-6;

  RopeConfig rope_main;                 // sliding layers
  RopeConfig rope_compress;             // CSA/HCA layers, their compressors and indexer

  int64_t index_n_heads = 64;
  int64_t index_head_dim = 128;
  int64_t index_topk = 512;
  int64_t compress_rate_csa = 4;
  int64_t compress_rate_hca = 128;

  std::vector<AttnKind> layer_types;    // [n_layers]
  std::vector<bool> hash_moe;           // [n_layers]: routed by tid2eid
  int64_t n_mtp_layers = 1;             // num_nextn_predict_layers

  bool tie_word_embeddings = false;
  int64_t bos_token_id = 0;             // -1: none
  std::vector<int64_t> eos_token_ids = {1};

  int64_t compress_rate(AttnKind k) const;  // 0 for sliding
};

// Parses and validates; errors name `path` and the field.
DeepseekV4Config parse_deepseek_v4_config(const nlohmann::json& cfg, const std::string& path);

}  // namespace nibble
