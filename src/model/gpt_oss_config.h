// gpt-oss (`GptOssForCausalLM`) hyper-parameters, parsed from config.json as
// openai/gpt-oss-20b and -120b publish it (rope_theta + rope_scaling) or as
// transformers 5 saves it (rope_parameters). Missing fields take
// transformers' GptOssConfig defaults (the 120b's dimensions); the loader
// insists that a checkpoint states its dimensions.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "model/deepseek_v4_config.h"  // RopeConfig

namespace nibble {

struct GptOssConfig {
  std::string path;  // config.json, for messages

  int64_t vocab_size = 201088;
  int64_t hidden = 2880;                // D
  int64_t n_layers = 36;
  int64_t n_heads = 64;                 // H query heads
  int64_t n_kv_heads = 8;               // KV heads (grouped-query attention)
  int64_t head_dim = 64;                // d
  int64_t inter = 2880;                 // expert width I
  int64_t n_experts = 128;              // num_local_experts
  int64_t top_k = 4;                    // num_experts_per_tok
  int64_t sliding_window = 128;         // keys a sliding layer sees, the query's own included
  int64_t max_position = 131072;        // max_position_embeddings
  double rms_eps = 1e-5;
  double swiglu_alpha = 1.702;
  double swiglu_limit = 7.0;
  bool attention_bias = true;
  RopeConfig rope;                      // YaRN by default (factor 32 over 4096, theta 150000)
  std::vector<bool> sliding;            // [n_layers]: layer_types[l] == "sliding_attention"
  bool tie_word_embeddings = false;
  int64_t bos_token_id = -1;            // -1: none
  std::vector<int64_t> eos_token_ids;
};

// Parses and validates; errors name `path` and the field.
GptOssConfig parse_gpt_oss_config(const nlohmann::json& cfg, const std::string& path);

}  // namespace nibble
