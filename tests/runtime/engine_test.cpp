// The public Engine (include/nibble/engine.h) on the shipped model: batched
// steps through sequence ids equal each sequence alone (bitwise), fork /
// truncate / release by id, errors naming the sequence, generate() equal to
// a greedy loop written here with step() + argmax, and cancel().
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <thread>

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

}  // namespace
}  // namespace nibble
