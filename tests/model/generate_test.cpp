// The generation loop on the DeepSeek-V4 fixtures: greedy decoding must
// reproduce Hugging Face's `generate(do_sample=False)` continuation; the
// stop conditions and the callback behave as documented.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "fixture_util.h"
#include "runtime/generate.h"
#include "util/error.h"

namespace nibble {
namespace {

struct Greedy {
  std::vector<int32_t> prompt, continuation;
  int64_t max_new = 0;
};

Greedy load_greedy(const std::string& name) {
  std::ifstream mf(test::fixture_dir(name) + "/expected/manifest.json");
  nlohmann::json g = nlohmann::json::parse(mf).at("greedy");
  Greedy out;
  for (const auto& t : g.at("prompt")) out.prompt.push_back(t.get<int32_t>());
  for (const auto& t : g.at("continuation")) out.continuation.push_back(t.get<int32_t>());
  out.max_new = g.at("max_new_tokens").get<int64_t>();
  return out;
}

class GenerateGreedy : public ::testing::TestWithParam<std::string> {};

TEST_P(GenerateGreedy, MatchesTransformersGenerate) {
  auto model = load_model(test::fixture_dir(GetParam()), test::test_load_options());
  Greedy g = load_greedy(GetParam());
  Session s(*model);
  GenerateOptions opt;
  opt.max_new_tokens = g.max_new;
  opt.sampler.temperature = 0;
  std::vector<int32_t> streamed;
  GenerateResult r = generate(s, g.prompt, opt, [&](int32_t t) {
    streamed.push_back(t);
    return true;
  });
  EXPECT_EQ(r.tokens, g.continuation);
  EXPECT_EQ(r.prompt_tokens, int64_t(g.prompt.size()));
  const bool ended_on_eos = !r.tokens.empty() && r.tokens.back() == model->eos_token_ids()[0];
  EXPECT_EQ(r.reason, ended_on_eos ? StopReason::stop_token : StopReason::max_tokens);
  std::vector<int32_t> expect_streamed = r.tokens;
  if (ended_on_eos) expect_streamed.pop_back();  // the stop token is not streamed
  EXPECT_EQ(streamed, expect_streamed);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GenerateGreedy, ::testing::ValuesIn(test::dsv4_fixtures()));

TEST(Generate, StopsOnCallbackAndCustomStopTokens) {
  auto model = load_model(test::fixture_dir("hf_tiny_fp8experts"), test::test_load_options());
  Greedy g = load_greedy("hf_tiny_fp8experts");
  GenerateOptions opt;
  opt.max_new_tokens = 10;
  opt.sampler.temperature = 0;
  opt.use_model_eos = false;

  Session a(*model);
  int calls = 0;
  GenerateResult r = generate(a, g.prompt, opt, [&](int32_t) { return ++calls < 3; });
  EXPECT_EQ(r.reason, StopReason::callback);
  EXPECT_EQ(r.tokens.size(), 3u);
  EXPECT_EQ(a.position(), int64_t(g.prompt.size()) + 2);  // the last sampled token is not fed

  // The second greedy token as a stop token ends generation right there.
  Session b(*model);
  opt.stop_tokens = {g.continuation[1]};
  r = generate(b, g.prompt, opt);
  EXPECT_EQ(r.reason, StopReason::stop_token);
  ASSERT_GE(r.tokens.size(), 2u);
  EXPECT_EQ(r.tokens.back(), g.continuation[1]);

  Session c(*model);
  opt.stop_tokens.clear();
  opt.max_new_tokens = 0;
  r = generate(c, g.prompt, opt);
  EXPECT_TRUE(r.tokens.empty());
  EXPECT_EQ(r.reason, StopReason::max_tokens);
  EXPECT_EQ(c.position(), int64_t(g.prompt.size()));  // the prompt is fed all the same
}

// The fixture with config.json's max_position_embeddings set to `context`
// (other files linked), in a temp folder removed by the destructor.
struct ShortContextModel {
  std::filesystem::path dir;
  explicit ShortContextModel(int64_t context) {
    const std::string src = test::fixture_dir("hf_tiny_fp8experts");
    dir = std::filesystem::temp_directory_path() / ("nibble_ctx_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    for (const auto& e : std::filesystem::directory_iterator(src))
      if (e.path().filename() != "config.json") std::filesystem::create_symlink(e.path(), dir / e.path().filename());
    std::ifstream in(src + "/config.json");
    nlohmann::json cfg = nlohmann::json::parse(in);
    cfg["max_position_embeddings"] = context;
    std::ofstream(dir / "config.json") << cfg.dump();
  }
  ~ShortContextModel() { std::filesystem::remove_all(dir); }
};

TEST(Generate, StopsAtTheEndOfTheContext) {
  Greedy g = load_greedy("hf_tiny_fp8experts");
  const int64_t L = int64_t(g.prompt.size()), context = L + 4;
  ShortContextModel tmp(context);
  auto model = load_model(tmp.dir.string(), test::test_load_options());
  ASSERT_EQ(model->max_context(), context);
  GenerateOptions opt;
  opt.max_new_tokens = 10;
  opt.sampler.temperature = 0;
  opt.use_model_eos = false;
  Session s(*model);
  GenerateResult r = generate(s, g.prompt, opt);
  // The prompt's forward gives token 1; each of the 4 free positions feeds one
  // token and gives the next: 5 tokens, the last one never fed.
  EXPECT_EQ(r.reason, StopReason::context_full);
  EXPECT_EQ(r.tokens.size(), 5u);
  EXPECT_EQ(s.position(), context);

  // A prompt that does not fit, fresh or after earlier turns, is refused up
  // front with both lengths, and the session is untouched.
  Session fresh(*model);
  std::vector<int32_t> long_prompt(size_t(context + 1), g.prompt[0]);
  try {
    generate(fresh, long_prompt, opt);
    ADD_FAILURE() << "a prompt longer than the context was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(context + 1) + " tokens"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(std::to_string(context)), std::string::npos) << e.what();
  }
  EXPECT_EQ(fresh.position(), 0);
  EXPECT_THROW(generate(s, std::vector<int32_t>{g.prompt[0]}, opt), Error);  // the full session
  EXPECT_EQ(s.position(), context);
  // The model itself refuses to run past its context.
  EXPECT_THROW(fresh.prefill(long_prompt), Error);
  EXPECT_EQ(fresh.position(), 0);
}

TEST(Generate, SamplingIsReproducibleBySeed) {
  auto model = load_model(test::fixture_dir("hf_tiny_fp8experts"), test::test_load_options());
  Greedy g = load_greedy("hf_tiny_fp8experts");
  GenerateOptions opt;
  opt.max_new_tokens = 12;
  opt.use_model_eos = false;
  opt.sampler.temperature = 1.5f;
  opt.sampler.seed = 7;
  Session a(*model), b(*model), c(*model);
  auto ra = generate(a, g.prompt, opt);
  auto rb = generate(b, g.prompt, opt);
  opt.sampler.seed = 8;
  auto rc = generate(c, g.prompt, opt);
  EXPECT_EQ(ra.tokens, rb.tokens);
  EXPECT_EQ(ra.tokens.size(), 12u);
  EXPECT_NE(ra.tokens, rc.tokens);  // 12 draws at temperature 1.5 from a ~2-nat-wide distribution
}

// Without penalties or an observer generate() has the model draw each token
// where it computes the logits (SeqStep::draw: on a GPU only ids cross);
// with an observer it samples here from the logits. Same settings, same
// seed: the same tokens, whatever the filters (the vocabulary limit too).
TEST(Generate, TokensDrawnByTheModelAreTheSamplersOwn) {
  for (const std::string& name : test::dsv4_fixtures()) {
    auto model = load_model(test::fixture_dir(name), test::test_load_options());
    const Greedy g = load_greedy(name);
    struct Setting {
      float temperature;
      int64_t top_k;
      float top_p, min_p;
      int64_t vocab_limit;
    };
    for (const Setting& st : {Setting{0, 0, 1, 0, 0}, Setting{0.8f, 20, 1, 0, 0}, Setting{1.3f, 0, 0.9f, 0.05f, 0},
                              Setting{1.0f, 0, 1, 0, model->vocab_size() / 2}})
      for (uint64_t seed : {1u, 2u}) {
        GenerateOptions opt;
        opt.max_new_tokens = 10;
        opt.use_model_eos = false;
        opt.sampler.temperature = st.temperature;
        opt.sampler.top_k = st.top_k;
        opt.sampler.top_p = st.top_p;
        opt.sampler.min_p = st.min_p;
        opt.sampler.vocab_limit = st.vocab_limit;
        opt.sampler.seed = seed;
        Session drawn(*model), here(*model);
        const GenerateResult a = generate(drawn, g.prompt, opt);
        int64_t observed = 0;
        opt.sampler.observe = [&](const float*, int64_t, int32_t) { ++observed; };
        const GenerateResult b = generate(here, g.prompt, opt);
        EXPECT_EQ(observed, 10);  // the second run did sample here
        EXPECT_EQ(a.tokens, b.tokens) << name << " temperature " << st.temperature << " seed " << seed;
        EXPECT_EQ(drawn.position(), here.position());
        if (st.vocab_limit > 0) {
          for (int32_t t : a.tokens) EXPECT_LT(t, st.vocab_limit);
        }
      }
  }
}

}  // namespace
}  // namespace nibble
