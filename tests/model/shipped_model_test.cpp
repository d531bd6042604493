// The model shipped in the repository (models/dsv4-tiny, a trained tiny
// DeepSeek-V4): nibble's greedy continuations must equal transformers' ones
// stored next to it in greedy_reference.json, ids and text, through the API
// and through `nibble run` without a MODEL_DIR.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "fixture_util.h"
#include "runtime/generate.h"
#include "tokenizer/tokenizer.h"

namespace nibble {
namespace {

namespace fs = std::filesystem;

const std::string kDir = std::string(NIBBLE_SOURCE_DIR) + "/models/dsv4-tiny";

bool shipped_model_present() {
  return fs::exists(kDir + "/model.safetensors") && fs::exists(kDir + "/greedy_reference.json");
}

nlohmann::json reference() {
  std::ifstream in(kDir + "/greedy_reference.json");
  return nlohmann::json::parse(in);
}

TEST(ShippedModel, GreedyIdsMatchTransformers) {
  ASSERT_TRUE(shipped_model_present()) << kDir << " is committed; a checkout without it is broken";
  auto model = load_model(kDir, test::test_load_options());
  const nlohmann::json ref = reference();
  // The reference kernels are slow under the sanitizers (minutes per
  // prompt); there the first two prompts stand for the rest, which the
  // optimized build checks.
#ifdef NIBBLE_SANITIZE
  const size_t n_prompts = 2;
#else
  const size_t n_prompts = ref.at("prompts").size();
#endif
  for (size_t i = 0; i < n_prompts && i < ref.at("prompts").size(); ++i) {
    const auto& p = ref.at("prompts")[i];
    std::vector<int32_t> ids, want;
    for (const auto& t : p.at("input_ids")) ids.push_back(t.get<int32_t>());
    for (const auto& t : p.at("output_ids")) want.push_back(t.get<int32_t>());
    Session s(*model);
    GenerateOptions opt;
    opt.max_new_tokens = ref.at("max_new_tokens").get<int64_t>();
    opt.sampler.temperature = 0;
    GenerateResult r = generate(s, ids, opt);
    // A step whose top-2 logits are within rounding of each other may pick
    // either; compare up to the first such step (none, normally).
    size_t upto = want.size();
    const auto& gaps = p.at("top2_gaps");
    for (size_t i = 0; i < gaps.size() && i < upto; ++i)
      if (gaps[i].get<double>() < 1e-3) upto = i;
    ASSERT_GE(r.tokens.size(), upto) << p.at("name").get<std::string>();
    EXPECT_EQ(std::vector<int32_t>(r.tokens.begin(), r.tokens.begin() + std::ptrdiff_t(upto)),
              std::vector<int32_t>(want.begin(), want.begin() + std::ptrdiff_t(upto)))
        << p.at("name").get<std::string>();
    if (upto == want.size()) {
      EXPECT_EQ(r.tokens, want) << p.at("name").get<std::string>();
    }
  }
}

TEST(ShippedModel, RunWithoutModelDirPrintsTheReferenceText) {
  ASSERT_TRUE(shipped_model_present()) << kDir << " is committed; a checkout without it is broken";
  const nlohmann::json ref = reference();
  const auto& p = ref.at("prompts").at(0);
  const fs::path prompt_file = fs::temp_directory_path() / ("nibble_prompt_" + std::to_string(::getpid()));
  // The prompt goes through a file and $(cat) so any character survives the
  // shell; the x keeps $(...) from eating the prompt's trailing newlines.
  std::ofstream(prompt_file) << p.at("prompt").get<std::string>();
  const std::string cmd = "P=\"$(cat " + prompt_file.string() + "; printf x)\"; P=\"${P%x}\"; " +
                          std::string(NIBBLE_BINARY) + " run -p \"$P\" --temp 0 -n " +
                          std::to_string(ref.at("max_new_tokens").get<int64_t>()) +
                          " --bandwidth 10 --linear-backend cpu_ref --moe-backend cpu_ref 2>/dev/null";
  FILE* f = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  EXPECT_EQ(pclose(f), 0);
  fs::remove(prompt_file);
  std::string want = p.at("text").get<std::string>();
  // `run` does not print the EOS token that ends generation.
  const std::string eos = "<｜end▁of▁sentence｜>";
  if (p.at("stopped_at_eos").get<bool>() && want.size() >= eos.size() &&
      want.compare(want.size() - eos.size(), eos.size(), eos) == 0)
    want.resize(want.size() - eos.size());
  EXPECT_EQ(out, want + "\n");
}

}  // namespace
}  // namespace nibble
