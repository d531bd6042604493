// config.json in both spellings: DeepSeek's official fields and the ones HF
// writes (layer_types, mlp_layer_types, compress_rates, partial_rotary_factor,
// nested rope_parameters). tools/gen_dsv4_fixtures.py saved HF's own
// serialisation of every fixture config as expected/config_hf.json.
#include <gtest/gtest.h>

#include <fstream>

#include "fixture_util.h"
#include "model/deepseek_v4_config.h"
#include "scratch_model.h"
#include "util/error.h"

namespace nibble {
namespace {

using nlohmann::json;

json read(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

void expect_same_rope(const RopeConfig& a, const RopeConfig& b) {
  EXPECT_EQ(a.theta, b.theta);
  EXPECT_EQ(a.yarn, b.yarn);
  EXPECT_EQ(a.factor, b.factor);
  EXPECT_EQ(a.original_max_position, b.original_max_position);
  EXPECT_EQ(a.beta_fast, b.beta_fast);
  EXPECT_EQ(a.beta_slow, b.beta_slow);
  EXPECT_EQ(a.attention_factor, b.attention_factor);
}

class ConfigSpellings : public ::testing::TestWithParam<std::string> {};

TEST_P(ConfigSpellings, OfficialAndHfSpellingsAgree) {
  const std::string dir = test::fixture_dir(GetParam());
  DeepseekV4Config off = parse_deepseek_v4_config(read(dir + "/config.json"), "config.json");
  json hf_json = read(dir + "/expected/config_hf.json");
  ASSERT_FALSE(hf_json.contains("compress_ratios"));
  ASSERT_FALSE(hf_json.contains("num_hash_layers"));
  ASSERT_FALSE(hf_json.contains("qk_rope_head_dim"));
  DeepseekV4Config hf = parse_deepseek_v4_config(hf_json, "config_hf.json");
  EXPECT_EQ(off.layer_types, hf.layer_types);
  EXPECT_EQ(off.hash_moe, hf.hash_moe);
  EXPECT_EQ(off.rope_dim, hf.rope_dim);
  EXPECT_EQ(off.compress_rate_csa, hf.compress_rate_csa);
  EXPECT_EQ(off.compress_rate_hca, hf.compress_rate_hca);
  expect_same_rope(off.rope_main, hf.rope_main);
  expect_same_rope(off.rope_compress, hf.rope_compress);
  EXPECT_TRUE(off.rope_compress.yarn);
  EXPECT_FALSE(off.rope_main.yarn);
  EXPECT_EQ(off.hidden, hf.hidden);
  EXPECT_EQ(off.n_mtp_layers, hf.n_mtp_layers);
  EXPECT_EQ(off.scoring, hf.scoring);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ConfigSpellings, ::testing::ValuesIn(test::dsv4_fixtures()));

TEST(ConfigSpellings, HfSpelledCheckpointGivesTheSameLogits) {
  test::ScratchModel m("flash_tiny_stock");
  m.config = read(test::fixture_dir("flash_tiny_stock") + "/expected/config_hf.json");
  m.write_config();
  auto a = load_model(test::fixture_dir("flash_tiny_stock"), test::test_load_options());
  auto b = load_model(m.path(), test::test_load_options());
  test::Expected exp = test::load_expected("flash_tiny_stock");
  const auto& seq = exp.sequences[1];
  std::vector<float> la(seq.tokens.size() * size_t(exp.vocab)), lb(la.size());
  auto sa = a->new_state();
  auto sb = b->new_state();
  a->forward(*sa, seq.tokens, la.data(), true);
  b->forward(*sb, seq.tokens, lb.data(), true);
  EXPECT_EQ(la, lb);
}

// Missing fields take HF's DeepseekV4Config defaults (values printed by
// transformers 5.24 for DeepseekV4Config(num_hidden_layers=6)).
TEST(ConfigDefaults, MatchTransformers) {
  DeepseekV4Config c = parse_deepseek_v4_config(json{{"num_hidden_layers", 6}}, "config.json");
  using K = AttnKind;
  EXPECT_EQ(c.layer_types, (std::vector<K>{K::hca, K::hca, K::hca, K::csa, K::hca, K::csa}));
  EXPECT_EQ(c.hash_moe, (std::vector<bool>{true, true, true, false, false, false}));
  EXPECT_EQ(c.rope_dim, 64);
  EXPECT_EQ(c.hidden, 4096);
  EXPECT_EQ(c.head_dim, 512);
  EXPECT_EQ(c.index_topk, 512);
  EXPECT_EQ(c.sliding_window, 128);
  EXPECT_EQ(c.rope_main.theta, 10000.0);
  EXPECT_EQ(c.rope_compress.theta, 160000.0);
  EXPECT_FALSE(c.rope_compress.yarn);  // no rope_scaling: plain RoPE, as HF
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{1});
}

TEST(ConfigDefaults, CompressRatiosLongerThanLayersListMtp) {
  // The official list includes the MTP layer(s): only the first num_hidden_layers count.
  json j = {{"num_hidden_layers", 3}, {"compress_ratios", {0, 4, 128, 0}}, {"num_hash_layers", 1},
            {"qk_rope_head_dim", 16}, {"head_dim", 64}};
  DeepseekV4Config c = parse_deepseek_v4_config(j, "config.json");
  EXPECT_EQ(c.layer_types, (std::vector<AttnKind>{AttnKind::sliding, AttnKind::csa, AttnKind::hca}));
  EXPECT_EQ(c.hash_moe, (std::vector<bool>{true, false, false}));
  EXPECT_EQ(c.rope_dim, 16);
}

TEST(ConfigDefaults, EosListAndBadValuesNamed) {
  DeepseekV4Config c = parse_deepseek_v4_config(json{{"eos_token_id", {1, 7}}}, "c.json");
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{1, 7}));
  auto err = [](const json& j) {
    try {
      parse_deepseek_v4_config(j, "c.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(err(json{{"hidden_size", -4}}).find("hidden_size"), std::string::npos);
  EXPECT_NE(err(json{{"scoring_func", "relu"}}).find("scoring_func"), std::string::npos);
  EXPECT_NE(err(json{{"qk_rope_head_dim", 7}}).find("qk_rope_head_dim"), std::string::npos);
  EXPECT_NE(err(json{{"layer_types", {"full_attention"}}, {"num_hidden_layers", 1}}).find("layer_types"),
            std::string::npos);
  EXPECT_NE(err(json{{"rope_scaling", {{"type", "longrope"}}}}).find("rope_type"), std::string::npos);
  EXPECT_NE(err(json{{"o_groups", 3}}).find("o_groups"), std::string::npos);  // 64*512 % 3 != 0
  EXPECT_NE(err(json::array()).find("c.json"), std::string::npos);
}

}  // namespace
}  // namespace nibble
