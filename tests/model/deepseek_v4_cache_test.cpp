// The per-sequence attention caches behind the backend seam
// (model/deepseek_v4_attention.h): a state's copy forks its caches (clone),
// and the CPU backend's attend refuses a cache another backend made rather
// than reading memory it does not own. The model-level behaviour (fork,
// truncate, refeed against transformers' logits) is in deepseek_v4_hf_test
// and batch_step_test.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "model/deepseek_v4_attention.h"
#include "util/error.h"

namespace nibble {
namespace {

// A cache as some device backend would make it: not the CPU's.
class ForeignCache final : public AttentionCache {
 public:
  std::unique_ptr<AttentionCache> clone() const override { return std::make_unique<ForeignCache>(*this); }
  int64_t truncate_floor() const override { return 0; }
  void truncate(int64_t) override {}
  uint64_t bytes() const override { return 0; }
};

TEST(AttentionCache, CopyingTheOwnerClonesTheCache) {
  const AttentionWeights w;  // a sliding layer: no compressor, no indexer
  AttentionShape s;
  s.rollback = 1;
  AttentionCachePtr a(std::make_unique<HostAttentionCache>(&w, s));
  auto& host_a = static_cast<HostAttentionCache&>(*a.get());
  host_a.state.ring.assign(8, 1.0f);
  host_a.state.ring_high = 2;

  AttentionCachePtr b = a;  // a fork
  ASSERT_NE(a.get(), b.get());
  auto& host_b = static_cast<HostAttentionCache&>(*b.get());
  EXPECT_EQ(host_b.state.ring, host_a.state.ring);
  EXPECT_EQ(host_b.state.ring_high, 2);
  EXPECT_EQ(b->bytes(), a->bytes());
  EXPECT_EQ(b->truncate_floor(), 1);  // ring_high - rollback: the clone keeps its layer's shape

  // The copies evolve apart.
  host_b.state.ring[0] = 5.0f;
  host_b.state.ring_high = 3;
  EXPECT_EQ(host_a.state.ring[0], 1.0f);
  EXPECT_EQ(host_a.state.ring_high, 2);

  AttentionCachePtr c;
  c = b;  // assignment clones too
  ASSERT_NE(c.get(), b.get());
  EXPECT_EQ(static_cast<HostAttentionCache&>(*c.get()).state.ring[0], 5.0f);
}

TEST(AttentionCache, CpuAttendRefusesAnotherBackendsCache) {
  ForeignCache foreign;
  const AttentionWeights w;
  HostAttentionCache host(&w, AttentionShape{});
  EXPECT_EQ(&host_attention_state(AttnSeq{&host, 0, 1, 0}), &host.state);
  try {
    host_attention_state(AttnSeq{&foreign, 0, 1, 0});
    FAIL() << "a foreign cache was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("another backend"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace nibble
