// The per-sequence attention caches behind the backend seam
// (model/attention_cache.h, model/cached_state.h): a state's copy forks its
// caches (clone), each cache truncates by its own layer's rules, and the CPU
// backend's attention ops refuse a cache another backend (or another kind of
// layer) made rather than reading memory they do not own. The model-level
// behaviour (fork, truncate, refeed against transformers' logits) is in
// deepseek_v4_hf_test, batch_step_test, gpt_oss_test and dsv3_test.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "model/cached_state.h"
#include "model/deepseek_v3_attention.h"
#include "model/deepseek_v4_attention.h"
#include "model/gpt_oss_attention.h"
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

// A cache of one kind handed to another kind's attention op is refused,
// naming the op, before anything is read or written.
TEST(AttentionCache, OpsRefuseAnotherKindOfCache) {
  const GqaShape g{2, 1, 4, 0};
  const MlaShape m{2, 4, 2, 4, 8, 0.5f};
  HostGqaCache gqa(g, 0);
  HostMlaCache mla(m);
  ForeignCache foreign;
  std::vector<float> buf(256, 0.0f);
  for (AttentionCache* c : {static_cast<AttentionCache*>(&gqa), static_cast<AttentionCache*>(&foreign)}) {
    try {
      mla_attend_cpu(m, buf.data(), MlaSeq{c, 1, 0}, buf.data(), buf.data(), buf.data(), buf.data(), nullptr,
                     CpuIsa::ref);
      FAIL() << "mla_attend took another kind of cache";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("DeepSeek-V3 attention"), std::string::npos) << e.what();
    }
  }
  for (AttentionCache* c : {static_cast<AttentionCache*>(&mla), static_cast<AttentionCache*>(&foreign)}) {
    try {
      gqa_attend_cpu(g, buf.data(), GqaSeq{c, 0, 1, 0}, buf.data(), buf.data(), buf.data(), buf.data(), nullptr,
                     CpuIsa::ref);
      FAIL() << "gqa_attend took another kind of cache";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("gpt-oss attention"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(mla.cache.rows(m.latent), 0);
  EXPECT_TRUE(gqa.kv.k.empty());
}

// The latent cache keeps every row: any truncation is in place, and a clone
// (a fork) is independent of its origin. Outputs after truncate-then-refeed
// equal the never-truncated ones bitwise (the same rows, the same sums).
TEST(AttentionCache, LatentCacheTruncatesAndForksInPlace) {
  const MlaShape s{2, 4, 2, 4, 8, 0.5f};
  const int64_t H = s.heads, qw = s.q_width(), C = s.latent, R = s.rope, n = 9;
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  std::vector<float> kv_b(size_t(H * (s.nope + s.v) * C)), q(size_t(n * H * qw)), lat(size_t(n * C)), kr(size_t(n * R));
  for (auto* v : {&kv_b, &q, &lat, &kr})
    for (float& x : *v) x = nd(rng);
  auto feed = [&](AttentionCache* c, int64_t p0, int64_t count, float* o) {
    mla_attend_cpu(s, kv_b.data(), MlaSeq{c, count, p0}, q.data() + p0 * H * qw, lat.data() + p0 * C,
                   kr.data() + p0 * R, o, nullptr);
  };
  std::vector<float> o(size_t(n * H * s.v)), o2(o.size());
  AttentionCachePtr a(std::make_unique<HostMlaCache>(s));
  feed(a.get(), 0, n, o.data());
  EXPECT_EQ(a->truncate_floor(), 0);
  AttentionCachePtr b = a;
  b->truncate(4);
  EXPECT_EQ(static_cast<HostMlaCache&>(*b.get()).cache.rows(C), 4);
  EXPECT_EQ(static_cast<HostMlaCache&>(*a.get()).cache.rows(C), n);  // the origin is untouched
  feed(b.get(), 4, n - 4, o2.data() + 4 * H * s.v);
  EXPECT_EQ(std::memcmp(o.data() + 4 * H * s.v, o2.data() + 4 * H * s.v, size_t((n - 4) * H * s.v) * 4), 0);
  EXPECT_THROW(b->truncate(n + 1), Error);
}

// A state of caches: the floor is the deepest cache's, truncation at or
// above it is in place, below it the state is left as it was for the model
// to refeed, and out of range is an error naming the position.
TEST(CachedState, TruncatesInPlaceDownToTheFloorOnly) {
  class State final : public CachedState {};
  const GqaShape g{2, 1, 4, 3};
  const int64_t kvw = g.kv_heads * g.head_dim, qw = g.heads * g.head_dim, ring = g.window - 1 + 2;
  State st;
  st.add_layer(std::make_unique<HostGqaCache>(g, ring));  // sliding: a floor
  st.add_layer(std::make_unique<HostGqaCache>(g, 0));     // full: floor 0
  std::vector<float> q(size_t(2 * qw), 0.5f), k(size_t(2 * kvw), 0.25f), o(q.size()), sinks(size_t(g.heads), 0.0f);
  std::vector<int32_t> ids = {7, 8};
  for (int step = 0; step < 4; ++step) {  // 8 tokens, 2 a step
    for (int64_t l = 0; l < st.layers(); ++l)
      gqa_attend_cpu(g, sinks.data(), GqaSeq{st.layer(l), 0, 2, st.position()}, q.data(), k.data(), k.data(),
                     o.data(), nullptr, CpuIsa::ref);
    st.advance(ids);
  }
  EXPECT_EQ(st.position(), 8);
  ASSERT_EQ(st.tokens().size(), 8u);
  // The ring holds positions [8 - ring, 8); a query at p needs (p - window, p).
  const int64_t floor = 8 - ring + g.window - 1;
  EXPECT_EQ(st.truncate_floor(), floor);
  EXPECT_FALSE(st.truncate_in_place(floor - 1, "the sequence"));
  EXPECT_EQ(st.position(), 8);
  EXPECT_TRUE(st.truncate_in_place(floor, "the sequence"));
  EXPECT_EQ(st.position(), floor);
  EXPECT_EQ(int64_t(st.tokens().size()), floor);
  for (int64_t bad : {int64_t(-1), floor + 1}) {
    try {
      st.truncate_in_place(bad, "the sequence");
      FAIL() << "truncate to " << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("truncate to position " + std::to_string(bad)), std::string::npos)
          << e.what();
    }
  }
  State fork = st;  // copies clone the caches
  EXPECT_NE(fork.layer(0), st.layer(0));
  EXPECT_LE(fork.memory_bytes(), st.memory_bytes());  // the same data, without spare capacity
  EXPECT_GT(fork.memory_bytes(), sizeof(State) + sizeof(int32_t) * fork.tokens().size());
  for (int64_t l = 0; l < fork.layers(); ++l)
    gqa_attend_cpu(g, sinks.data(), GqaSeq{fork.layer(l), 0, 2, fork.position()}, q.data(), k.data(), k.data(),
                   o.data(), nullptr, CpuIsa::ref);
  fork.advance(ids);
  EXPECT_EQ(fork.position(), floor + 2);
  EXPECT_EQ(st.position(), floor);
  EXPECT_EQ(static_cast<HostGqaCache*>(st.layer(1))->kv.fed, floor);
}

}  // namespace
}  // namespace nibble
