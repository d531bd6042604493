// DeepSeek-V3 (`DeepseekV3ForCausalLM`: DeepSeek-V3 / R1, and Kimi K2, whose
// config.json names the same architecture with model_type "kimi_k2")
// hyper-parameters, parsed from config.json as the publishers write it
// (rope_theta + rope_scaling {type: yarn, ...}) or as transformers 5 saves it
// (rope_parameters). Missing fields take transformers' DeepseekV3Config
// defaults (the 671B's dimensions); the loader insists that a checkpoint
// states its dimensions.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "model/deepseek_v4_config.h"  // RopeConfig

namespace nibble {

struct DeepseekV3Config {
  std::string path;  // config.json, for messages
  std::string model_type = "deepseek_v3";  // or "kimi_k2"

  int64_t vocab_size = 129280;          // V
  int64_t hidden = 7168;                // D
  int64_t n_layers = 61;
  int64_t inter = 18432;                // dense MLP width (layers < first_k_dense)
  int64_t moe_inter = 2048;             // routed expert width I
  int64_t first_k_dense = 3;            // first_k_dense_replace

  // Multi-head latent attention.
  int64_t n_heads = 128;                // H
  int64_t q_lora_rank = 1536;           // 0: no q compression (q_proj [H*(nope+rope), D])
  int64_t kv_lora_rank = 512;           // C, the latent the cache holds
  int64_t qk_nope = 128;                // per-head key width without RoPE
  int64_t qk_rope = 64;                 // per-head RoPE'd width (one key shared by all heads)
  int64_t v_head_dim = 128;
  double softmax_scale = 0;             // (nope + rope)^-0.5 * mscale(factor, mscale_all_dim)^2
  RopeConfig rope;                      // interleaved pairs over qk_rope channels

  // MoE.
  int64_t n_experts = 256;              // n_routed_experts
  int64_t n_shared = 1;                 // n_shared_experts: one MLP of width n_shared * moe_inter
  int64_t top_k = 8;                    // num_experts_per_tok
  int64_t n_group = 8;                  // expert groups; a token's experts come from topk_group of them
  int64_t topk_group = 4;
  bool norm_topk_prob = true;
  double routed_scaling = 2.5;          // routed_scaling_factor

  int64_t max_position = 4096;          // max_position_embeddings
  double rms_eps = 1e-6;
  int64_t n_mtp_layers = 1;             // num_nextn_predict_layers: layers n_layers .. n_layers + n - 1
  bool tie_word_embeddings = false;
  int64_t bos_token_id = 0;             // -1: none
  std::vector<int64_t> eos_token_ids = {1};

  bool dense(int64_t layer) const { return layer < first_k_dense; }
  int64_t qk_head_dim() const { return qk_nope + qk_rope; }
};

// Parses and validates; errors name `path` and the field.
DeepseekV3Config parse_deepseek_v3_config(const nlohmann::json& cfg, const std::string& path);

}  // namespace nibble
