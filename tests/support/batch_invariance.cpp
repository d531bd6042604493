#include "support/batch_invariance.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>

#include "model/model.h"

namespace nibble::test {

void expect_random_batches_equal_alone(const Model& m, const std::vector<std::vector<int32_t>>& seqs, uint32_t seed) {
  const int64_t V = m.vocab_size();
  std::vector<std::vector<float>> alone;
  for (const auto& s : seqs) {
    auto st = m.new_state();
    alone.emplace_back(s.size() * size_t(V));
    m.forward(*st, s, alone.back().data(), true);
  }
  std::mt19937 rng(seed);
  std::vector<std::unique_ptr<ModelState>> states;
  std::vector<std::vector<float>> got;
  for (const auto& s : seqs) {
    states.push_back(m.new_state());
    got.emplace_back(s.size() * size_t(V));
  }
  for (;;) {
    std::vector<SeqStep> batch;
    for (size_t i = 0; i < seqs.size(); ++i) {
      const int64_t pos = states[i]->position(), n = int64_t(seqs[i].size());
      if (pos == n || rng() % 3 == 0) continue;
      const int64_t take = std::min<int64_t>(n - pos, 1 + int64_t(rng() % 9));
      SeqStep s;
      s.state = states[i].get();
      s.tokens = std::span<const int32_t>(seqs[i].data() + pos, size_t(take));
      s.rows = LogitRows::all;
      s.logits = got[i].data() + pos * V;
      s.id = int64_t(i);
      batch.push_back(s);
    }
    std::shuffle(batch.begin(), batch.end(), rng);
    bool done = true;
    for (size_t i = 0; i < seqs.size(); ++i) done = done && states[i]->position() == int64_t(seqs[i].size());
    if (done) break;
    m.step(batch);
  }
  for (size_t i = 0; i < seqs.size(); ++i)
    EXPECT_EQ(std::memcmp(got[i].data(), alone[i].data(), alone[i].size() * 4), 0) << "sequence " << i;
}

}  // namespace nibble::test
