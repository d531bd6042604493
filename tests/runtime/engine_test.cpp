// The public Engine (include/nibble/engine.h) on the shipped model: batched
// steps through sequence ids equal each sequence alone (bitwise), fork /
// truncate / release by id, errors naming the sequence, generate() equal to
// a greedy loop written here with step() + argmax, and cancel(); the
// token history behind repetition_penalty through step / generate / fork /
// truncate, presence penalties per sampler, reseed, generation_config.json
// defaults and the kernel names.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>
#include <unistd.h>

#include "nibble/engine.h"

namespace nibble {
namespace {

const std::string kShipped = std::string(NIBBLE_SOURCE_DIR) + "/models/dsv4-tiny";

std::unique_ptr<Engine> shipped() {
  EngineOptions o;
  o.threads = 2;
  o.bandwidth_gbps = 10;
  return Engine::load(kShipped, o);
}

int32_t argmax_of(const std::vector<float>& l) {
  return int32_t(std::max_element(l.begin(), l.end()) - l.begin());  // first maximum
}

void expect_error(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing: " << needle;
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Engine, BatchedStepsEqualEachSequenceAlone) {
  auto e = shipped();
  ASSERT_TRUE(e->has_tokenizer());
  const std::vector<std::vector<int32_t>> prompts = {
      e->tokenize("ROMEO.\nBut soft, what light"), e->tokenize("JULIET."), e->tokenize("First Citizen.\nBefore we proceed")};
  // Alone: each prompt in one step, all logits.
  std::vector<std::vector<float>> alone;
  for (const auto& p : prompts) {
    const SeqId s = e->create();
    StepInput in{s, p, true};
    alone.push_back(e->step(std::span<const StepInput>(&in, 1))[0]);
    e->release(s);
  }
  // Together: all three, fed two tokens per step (the shorter ones finish early).
  std::vector<SeqId> ids;
  for (size_t i = 0; i < prompts.size(); ++i) ids.push_back(e->create());
  std::vector<std::vector<float>> got(prompts.size());
  const int64_t V = e->vocab_size();
  for (size_t pos = 0;; pos += 2) {
    std::vector<StepInput> batch;
    std::vector<size_t> who;
    for (size_t i = 0; i < prompts.size(); ++i)
      if (pos < prompts[i].size()) {
        const size_t n = std::min<size_t>(2, prompts[i].size() - pos);
        batch.push_back(StepInput{ids[i], std::span<const int32_t>(prompts[i].data() + pos, n), true});
        who.push_back(i);
      }
    if (batch.empty()) break;
    auto out = e->step(batch);
    for (size_t j = 0; j < who.size(); ++j) got[who[j]].insert(got[who[j]].end(), out[j].begin(), out[j].end());
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_EQ(got[i].size(), prompts[i].size() * size_t(V));
    EXPECT_EQ(std::memcmp(got[i].data(), alone[i].data(), got[i].size() * sizeof(float)), 0) << "prompt " << i;
    EXPECT_EQ(e->position(ids[i]), int64_t(prompts[i].size()));
    EXPECT_GT(e->memory_bytes(ids[i]), 0u);
  }
  EXPECT_EQ(e->live_sequences(), prompts.size());
}

TEST(Engine, SequenceIdsForkTruncateRelease) {
  auto e = shipped();
  const std::vector<int32_t> p = e->tokenize("ROMEO.\nBut soft, what light through yonder window");
  const SeqId a = e->create();
  StepInput in{a, std::span<const int32_t>(p.data(), 5), false};
  e->step(std::span<const StepInput>(&in, 1));
  const SeqId b = e->fork(a);
  EXPECT_NE(a, b);
  EXPECT_EQ(e->position(b), 5);
  e->truncate(a, 2);
  EXPECT_EQ(e->position(a), 2);
  EXPECT_EQ(e->position(b), 5);  // the fork did not move
  // a refed from 2 and b fed on from 5 reach the same logits at the same token.
  StepInput ra{a, std::span<const int32_t>(p.data() + 2, 4), false};
  StepInput rb{b, std::span<const int32_t>(p.data() + 5, 1), false};
  StepInput both[2] = {ra, rb};
  auto out = e->step(both);
  EXPECT_EQ(std::memcmp(out[0].data(), out[1].data(), out[0].size() * sizeof(float)), 0);

  expect_error([&] { e->truncate(a, 7); }, "sequence " + std::to_string(a) + ": truncate to position 7");
  expect_error([&] { e->truncate(a, -1); }, "truncate to position -1");
  StepInput twice[2] = {StepInput{a, std::span<const int32_t>(p.data(), 1)}, StepInput{a, std::span<const int32_t>(p.data(), 1)}};
  expect_error([&] { e->step(twice); }, "sequence " + std::to_string(a) + " appears twice");
  const int32_t bad[1] = {int32_t(e->vocab_size())};
  StepInput bad_in[2] = {StepInput{b, std::span<const int32_t>(p.data(), 1)}, StepInput{a, bad}};
  expect_error([&] { e->step(bad_in); }, "sequence " + std::to_string(a) + ": token 0 (id " +
                                              std::to_string(e->vocab_size()) + ") is outside the vocabulary");
  EXPECT_EQ(e->position(a), 6);  // nothing moved
  EXPECT_EQ(e->position(b), 6);
  e->release(b);
  expect_error([&] { e->position(b); }, "sequence " + std::to_string(b) + " was released");
  expect_error([&] { e->release(b); }, "was released");
  expect_error([&] { e->fork(12345); }, "sequence 12345 does not exist");
  // The failed steps left nothing busy.
  e->release(a);
  EXPECT_EQ(e->live_sequences(), 0u);
}

TEST(Engine, GenerateEqualsAGreedyLoopOfSteps) {
  auto e = shipped();
  const std::vector<int32_t> prompt = e->tokenize("ROMEO.\n");
  // The loop by hand: feed the prompt, argmax, feed it, ...
  const SeqId ref = e->create();
  std::vector<int32_t> expect;
  StepInput in{ref, prompt};
  std::vector<float> logits = e->step(std::span<const StepInput>(&in, 1))[0];
  std::vector<int64_t> eos = e->eos_token_ids();
  for (int i = 0; i < 24; ++i) {
    const int32_t t = argmax_of(logits);
    expect.push_back(t);
    if (std::find(eos.begin(), eos.end(), t) != eos.end()) break;
    StepInput next{ref, std::span<const int32_t>(&expect.back(), 1)};
    logits = e->step(std::span<const StepInput>(&next, 1))[0];
  }
  const SeqId s = e->create();
  GenerationParams g;
  g.max_new_tokens = 24;
  g.sampling.temperature = 0;
  std::vector<int32_t> streamed;
  GenerationResult r = e->generate(s, prompt, g, [&](int32_t t) {
    streamed.push_back(t);
    return true;
  });
  EXPECT_EQ(r.tokens, expect);
  EXPECT_EQ(r.prompt_tokens, int64_t(prompt.size()));
  EXPECT_EQ(e->position(s), int64_t(prompt.size() + r.tokens.size()) - 1);

  // cancel() from inside the stream stops before the next token.
  const SeqId c = e->create();
  int seen = 0;
  r = e->generate(c, prompt, g, [&](int32_t) {
    if (++seen == 3) e->cancel(c);
    return true;
  });
  EXPECT_EQ(r.reason, FinishReason::cancelled);
  EXPECT_EQ(r.tokens.size(), 3u);
  EXPECT_STREQ(finish_reason_name(r.reason), "cancelled");
  // A sequence in a running generate() cannot be released from another thread.
  const SeqId d = e->create();
  std::atomic<bool> started{false}, checked{false};
  std::thread t([&] {
    e->generate(d, prompt, g, [&](int32_t) {
      started = true;
      while (!checked) std::this_thread::yield();
      return false;
    });
  });
  while (!started) std::this_thread::yield();
  expect_error([&] { e->release(d); }, "in use by a running step");
  checked = true;
  t.join();
  e->release(d);
}

// Logits of `vocab` zeros with the given (id, value) pairs set.
std::vector<float> logits_with(int64_t vocab, std::initializer_list<std::pair<int32_t, float>> set) {
  std::vector<float> l(size_t(vocab), 0.0f);
  for (auto [id, v] : set) l[size_t(id)] = v;
  return l;
}

TEST(Engine, RepetitionPenaltyCoversEveryTokenTheSequenceHolds) {
  auto e = shipped();
  const int64_t V = e->vocab_size();
  // 7 leads 9 by 1; divided by 2 (transformers' rule for a positive logit)
  // it falls to 2.5, below 9's 4. Token 9 is never fed, so it stays at 4.
  const std::vector<float> l = logits_with(V, {{7, 5.0f}, {9, 4.0f}});
  SamplingParams greedy;
  greedy.temperature = 0;
  SamplingParams penalised = greedy;
  penalised.repetition_penalty = 2.0f;

  const SeqId s = e->create();
  const std::vector<int32_t> fed = {3, 7, 11};
  const StepInput in{s, fed, false, /*want_logits=*/false};
  e->step(std::span<const StepInput>(&in, 1));
  EXPECT_EQ(e->tokens(s), fed);
  EXPECT_EQ(e->sample(s, l.data(), greedy), 7);
  e->reseed(s);
  EXPECT_EQ(e->sample(s, l.data(), penalised), 9);  // 7 was fed: penalised

  // A fork holds the same tokens; truncating below 7 forgets it.
  const SeqId f = e->fork(s);
  EXPECT_EQ(e->tokens(f), fed);
  e->truncate(s, 1);
  EXPECT_EQ(e->tokens(s), std::vector<int32_t>{3});
  e->reseed(s);
  EXPECT_EQ(e->sample(s, l.data(), penalised), 7);
  EXPECT_EQ(e->sample(f, l.data(), penalised), 9);

  // A negative logit is multiplied instead: 7 at -1 falls to -2, below the
  // zeros of the others, so the lowest id (0) wins the tie of zeros.
  const std::vector<float> neg = logits_with(V, {{7, -1.0f}});
  const SeqId n = e->create();
  const std::vector<int32_t> only7 = {7};
  const StepInput in7{n, only7, false, false};
  e->step(std::span<const StepInput>(&in7, 1));
  EXPECT_EQ(e->sample(n, neg.data(), penalised), 0);
  EXPECT_EQ(e->memory_bytes(n) >= sizeof(int32_t), true);
}

TEST(Engine, PresencePenaltyCountsWhatTheSamplerDrewUntilReseed) {
  auto e = shipped();
  const int64_t V = e->vocab_size();
  const std::vector<float> l = logits_with(V, {{7, 5.0f}, {9, 4.5f}});
  SamplingParams p;
  p.temperature = 0;
  p.presence_penalty = 1.0f;  // 7 once drawn: 5 - 1 = 4 < 4.5
  const SeqId s = e->create();
  EXPECT_EQ(e->sample(s, l.data(), p), 7);
  EXPECT_EQ(e->sample(s, l.data(), p), 9);
  e->reseed(s);
  EXPECT_EQ(e->sample(s, l.data(), p), 7);
  // frequency: 7 drawn twice at 0.3 each costs 0.6 > its 0.5 lead.
  SamplingParams f;
  f.temperature = 0;
  f.frequency_penalty = 0.3f;
  const SeqId t = e->create();
  EXPECT_EQ(e->sample(t, l.data(), f), 7);
  EXPECT_EQ(e->sample(t, l.data(), f), 7);  // 5 - 0.3 = 4.7 > 4.5
  EXPECT_EQ(e->sample(t, l.data(), f), 9);  // 5 - 0.6 = 4.4 < 4.5
  SamplingParams bad;
  bad.presence_penalty = 3;
  expect_error([&] { e->sample(e->create(), l.data(), bad); }, "--presence-penalty must be in [-2, 2], got 3");
}

// StepInput::sample: a decode loop that draws in the step gives the tokens
// of a loop that steps for logits and calls sample() (same settings, same
// seed): drawn where the logits are without penalties (no logits come
// back), here from them with a penalty (they do). Misuse is refused before
// anything runs, and a failed step leaves the sampler's stream as it was.
TEST(Engine, TokensDrawnInTheStepAreSamplesOwn) {
  auto e = shipped();
  const std::vector<int32_t> prompt = e->tokenize("ROMEO.\nBut soft, what light");
  for (float penalty : {1.0f, 1.3f}) {
    SamplingParams p;
    p.temperature = 0.9f;
    p.top_p = 0.95f;
    p.seed = 11;
    p.repetition_penalty = penalty;
    const SeqId a = e->create(), b = e->create();
    // Both prompts in one step, as the server feeds them.
    StepInput pre[2] = {{a, prompt}, {b, prompt}};
    auto pl = e->step(pre);
    int32_t ta = e->sample(a, pl[0].data(), p), tb = e->sample(b, pl[1].data(), p);
    ASSERT_EQ(ta, tb);
    for (int i = 0; i < 12; ++i) {
      StepInput ia{a, std::span<const int32_t>(&ta, 1)};
      const auto la = e->step(std::span<const StepInput>(&ia, 1));
      ta = e->sample(a, la[0].data(), p);
      int32_t got = -1;
      StepInput ib{b, std::span<const int32_t>(&tb, 1)};
      ib.sample = &p;
      ib.token = &got;
      const auto lb = e->step(std::span<const StepInput>(&ib, 1));
      EXPECT_EQ(lb[0].empty(), penalty == 1.0f) << "penalty " << penalty;
      EXPECT_EQ(got, ta) << "token " << i << " penalty " << penalty;
      tb = got;
    }
    e->release(a);
    e->release(b);
  }
  SamplingParams p;
  p.temperature = 0.9f;
  const SeqId s = e->create();
  int32_t tok = -1;
  const int32_t one[1] = {3};
  StepInput all{s, one, true};
  all.sample = &p;
  all.token = &tok;
  expect_error([&] { e->step(std::span<const StepInput>(&all, 1)); }, "a token drawn in the step needs");
  StepInput no_place{s, one};
  no_place.sample = &p;
  expect_error([&] { e->step(std::span<const StepInput>(&no_place, 1)); }, "a token drawn in the step needs");
  EXPECT_EQ(e->position(s), 0);
  // A step that fails in the model (a token outside the vocabulary) draws
  // nothing: the next draw is the one the failed step would have made.
  const SeqId t = e->create();
  const int32_t bad[1] = {int32_t(e->vocab_size())};
  int32_t first = -1, second = -1;
  StepInput ok{s, one};
  ok.sample = &p;
  ok.token = &first;
  StepInput wrong{t, bad};
  StepInput both[2] = {ok, wrong};
  expect_error([&] { e->step(both); }, "outside the vocabulary");
  e->step(std::span<const StepInput>(&ok, 1));
  const SeqId fresh = e->create();
  StepInput again{fresh, one};
  again.sample = &p;
  again.token = &second;
  e->step(std::span<const StepInput>(&again, 1));
  EXPECT_EQ(first, second);  // both the first draw of a seed-0 sampler
}

TEST(Engine, GenerateRecordsWhatItFedAndPenalisesThePrompt) {
  auto e = shipped();
  const std::vector<int32_t> prompt = e->tokenize("ROMEO.\nBut soft");
  GenerationParams g;
  g.max_new_tokens = 12;
  g.use_model_eos = false;
  g.sampling.temperature = 0;
  const SeqId s = e->create();
  GenerationResult r = e->generate(s, prompt, g);
  ASSERT_EQ(r.tokens.size(), 12u);
  std::vector<int32_t> expect = prompt;
  expect.insert(expect.end(), r.tokens.begin(), r.tokens.end() - 1);  // the last one is not fed
  EXPECT_EQ(e->tokens(s), expect);
  EXPECT_EQ(e->position(s), int64_t(expect.size()));

  // With a huge repetition penalty and the logits observed, every drawn
  // token is the argmax of the logits with the sequence's tokens penalised,
  // computed here from the raw logits of the same steps.
  const SeqId p = e->create();
  GenerationParams h = g;
  h.sampling.repetition_penalty = 50.0f;
  std::vector<std::vector<float>> seen;
  h.observe = [&](const float* l, int64_t V, int32_t) { seen.emplace_back(l, l + V); };
  r = e->generate(p, prompt, h);
  ASSERT_EQ(seen.size(), r.tokens.size());
  const SeqId ref = e->create();
  StepInput in{ref, prompt};
  std::vector<float> raw = e->step(std::span<const StepInput>(&in, 1))[0];
  std::vector<int32_t> context = prompt;
  for (size_t i = 0; i < r.tokens.size(); ++i) {
    std::vector<float> want = raw;
    for (int32_t id : context) want[size_t(id)] = raw[size_t(id)] < 0 ? raw[size_t(id)] * 50.0f : raw[size_t(id)] / 50.0f;
    EXPECT_EQ(std::memcmp(want.data(), seen[i].data(), want.size() * sizeof(float)), 0) << "token " << i;
    EXPECT_EQ(r.tokens[i], argmax_of(want)) << "token " << i;
    context.push_back(r.tokens[i]);
    StepInput next{ref, std::span<const int32_t>(&r.tokens[i], 1)};
    raw = e->step(std::span<const StepInput>(&next, 1))[0];
  }
}

TEST(Engine, GenerationDefaultsComeFromGenerationConfig) {
  namespace fs = std::filesystem;
  auto e = shipped();
  const GenerationDefaults& d = e->generation_defaults();
  EXPECT_EQ(d.source, kShipped + "/generation_config.json");
  EXPECT_EQ(d.sampling.temperature, 1.0f);
  EXPECT_EQ(d.stop_tokens, std::vector<int64_t>{1});

  // A copy of the shipped model with its own generation_config.json.
  const fs::path dir = fs::temp_directory_path() / ("nibble_engine_gc_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& f : fs::directory_iterator(kShipped))
    if (f.path().filename() != "generation_config.json") fs::create_symlink(f.path(), dir / f.path().filename());
  std::ofstream(dir / "generation_config.json")
      << R"({"do_sample": false, "temperature": 0.6, "top_p": 0.95, "top_k": 20, "min_p": 0.05,
            "repetition_penalty": 1.1, "eos_token_id": [1, 5]})";
  EngineOptions o;
  o.threads = 1;
  o.bandwidth_gbps = 10;
  o.load_tokenizer = false;
  auto g = Engine::load(dir.string(), o);
  const GenerationDefaults& gd = g->generation_defaults();
  EXPECT_EQ(gd.sampling.temperature, 0.0f);  // do_sample false: greedy
  EXPECT_EQ(gd.sampling.top_p, 0.95f);
  EXPECT_EQ(gd.sampling.top_k, 20);
  EXPECT_EQ(gd.sampling.min_p, 0.05f);
  EXPECT_EQ(gd.sampling.repetition_penalty, 1.1f);
  EXPECT_EQ(gd.stop_tokens, (std::vector<int64_t>{1, 5}));
  EXPECT_FALSE(g->has_tokenizer());
  std::ofstream(dir / "generation_config.json") << R"({"top_k": -3})";
  expect_error([&] { Engine::load(dir.string(), o); }, "generation_config.json: field \"top_k\" must be an integer");
  fs::remove_all(dir);

  // The kernel names for logs: the planner's choice for each group.
  EXPECT_NE(e->kernels("moe").find("cpu_"), std::string::npos) << e->kernels("moe");
  EXPECT_NE(e->kernels("linear").find("cpu_"), std::string::npos) << e->kernels("linear");
  expect_error([&] { e->kernels("attention"); }, "unknown op group \"attention\"");
  o.moe_backend = "cpu_ref";
  o.load_tokenizer = true;
  EXPECT_EQ(Engine::load(kShipped, o)->kernels("moe"), "cpu_ref");
}

}  // namespace
}  // namespace nibble
