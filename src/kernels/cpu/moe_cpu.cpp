// The fused MoE layer (see moe_cpu.h). One call, n tokens:
//
//   1. router   logits[n, E] = x · W_gate^T           (f32 activations, exact products)
//   2. routing  experts / weights per token           (moe_routing.h, as HF)
//   3. grouping per hit expert, in ascending order, its tokens and weights;
//               the shared expert is one more group holding every token
//   4. phase A  h = silu(min(w1 x, l)) * clamp(w3 x, -l, l) for every group,
//               work items = (group, block of w1/w3 rows); gpt-oss experts
//               (ExpertWeights::fused) run their one gate_up matrix over the
//               block's row pairs instead, add b13 and take
//               h = (clamp(up) + 1) * g * sigmoid(alpha * g), g = min(gate, l)
//   5. phase B  y[t] = sum over groups of weight * (w2 h), work items = blocks
//               of output rows; each item walks the groups in order, so every
//               output element is summed by one thread in HF's order (a
//               fused expert's b2 is added, weighted, right after its rows)
//
// Between the phases the activations are re-prepared (the FP4 layout, or
// int8 blocks for FP4 experts with the opt-in int8 kernels). All buffers are thread-local and only grow, so steady-state
// decode allocates nothing.
//
// Batch invariance: a token's output does not depend on the other tokens of
// the call (how many, in which order, which experts they share with it).
// Routing, activation preparation and SwiGLU are per token (and per
// element); the row kernels compute each (row, token) dot product the same
// way whatever tile of tokens it runs in (linear_avx512.cpp); and y[t] is
// summed in a fixed order, its own experts ascending (its slots in order
// when hash routing repeats one), then the shared expert, starting from 0.
// tests/kernels/batch_invariance_test.cpp checks it bitwise.
#include "kernels/cpu/moe_cpu.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/linear_cpu.h"
#include "kernels/moe_routing.h"
#include "util/error.h"

namespace nibble {

namespace {

using x86::ActsClass;
using x86::PreparedActs;
using x86::RawWeights;
using x86::RowsOut;

// One expert's share of the batch.
struct Group {
  RawWeights w1, w3, w2;
  RawWeights w13{};          // fused gate_up (gpt-oss); w1 / w3 unused then
  bool fused = false;
  const float* b13 = nullptr;  // [2I] or null
  const float* b2 = nullptr;   // [D] or null
  int64_t first = 0;         // offset of its tokens in MoeScratch::tokens / alphas
  int64_t count = 0;         // tokens routed to it (a token may repeat under hash routing)
  bool shared = false;       // the shared expert: every token, weight 1
  float* h = nullptr;        // [count, I] gate, then SwiGLU output
  float* u = nullptr;        // [count, I] up; fused: [count, 2I] gate_up
  PreparedActs x{};          // its tokens' x (rows of the prepared batch)
  PreparedActs hp{};         // prepared h
  uint8_t* hp_out = nullptr; // where phase A's h is prepared to (hp.data)
};

// A group for expert weights `ew`, checked: w1 and w3 share x, so they must
// want the same activation layout (e.g. both FP4).
Group make_group(const cpu::IsaKernels& k, const ExpertWeights& ew) {
  Group g;
  if (ew.fused()) {
    g.fused = true;
    g.w13 = cpu::raw_weights(ew.w13);
    g.w1 = g.w13;  // what decides the layout of x
    g.w2 = cpu::raw_weights(ew.w2);
    g.b13 = ew.b13;
    g.b2 = ew.b2;
    return g;
  }
  g.w1 = cpu::raw_weights(ew.w1);
  g.w3 = cpu::raw_weights(ew.w3);
  g.w2 = cpu::raw_weights(ew.w2);
  if (k.acts_class(g.w1.kind, 1) != k.acts_class(g.w3.kind, 1))
    fail("MoE expert: ", ew.w1.name, " (", format_name(ew.w1.format), ") and ", ew.w3.name, " (",
         format_name(ew.w3.format), ") need the same activation layout");
  return g;
}

struct MoeScratch {
  std::vector<float> logits;                 // [n, E]
  MoeRouting routing;
  std::vector<int32_t> counts;               // [E]
  std::vector<int32_t> tokens;               // [n * top_k] grouped by expert
  std::vector<float> alphas;                 // [n * top_k] routing weight of each
  std::vector<Group> groups;
  cpu::ScratchBuffer gate_acts;
  cpu::ScratchBuffer x_acts[x86::kActsClasses];  // the batch's x, per ActsClass
  bool x_ready[x86::kActsClasses] = {};
  PreparedActs x_prepared[x86::kActsClasses];
  cpu::ScratchBuffer hu;                     // every group's h and u
  cpu::ScratchBuffer h_acts;                 // every group's prepared h
};

// rows [0, rows) of `w` against `acts` into `out`, all threads.
void run_rows(const cpu::IsaKernels& k, const RawWeights& w, const PreparedActs& acts,
              const RowsOut& out, ThreadPool* pool) {
  const int threads = pool ? pool->size() : 1;
  const int64_t chunk = cpu::row_chunk(w.rows, threads);
  const int64_t items = (w.rows + chunk - 1) / chunk;
  cpu::parallel_items(pool, items, [&](int64_t i, int) {
    const int64_t r0 = i * chunk, r1 = std::min(w.rows, r0 + chunk);
    k.linear_rows(w, r0, r1, acts, out);
  });
}

}  // namespace

void moe_with_kernels(const cpu::IsaKernels& k, const MoeWeights& w, const float* x, const int32_t* token_ids,
                      int64_t n, float* y, ThreadPool* pool) {
  // The full check_moe_weights(w) (every expert's shapes) runs once when a
  // layer is bound; per call only what indexing below relies on.
  if (int64_t(w.experts.size()) != w.n_experts || w.top_k <= 0 || w.top_k > w.n_experts)
    fail("MoE layer: ", w.experts.size(), " experts for n_experts ", w.n_experts, " and top_k ", w.top_k,
         " (check_moe_weights names the fault)");
  if (n < 0) fail("MoE layer: negative token count ", n);
  if (n == 0) return;
  if (!x || !y) fail("MoE layer: null activations");
  const int64_t D = w.hidden, I = w.inter, E = w.n_experts, K = w.top_k;
  const int threads = pool ? pool->size() : 1;
  // A reference, not the thread_local itself: the lambdas below run on the
  // pool's workers, where the name would denote their own (empty) instance.
  thread_local MoeScratch scratch;
  MoeScratch& s = scratch;

  // 1. Router logits, f32.
  const RawWeights gate = cpu::raw_weights(w.gate);
  const PreparedActs gate_x = cpu::prepare_acts(k, k.acts_class(gate.kind, n), x, n, D, s.gate_acts, pool);
  s.logits.resize(size_t(n * E));
  run_rows(k, gate, gate_x, RowsOut{s.logits.data(), E, nullptr, false, nullptr}, pool);
  if (w.gate_bias)
    for (int64_t t = 0; t < n; ++t)
      for (int64_t e = 0; e < E; ++e) s.logits[size_t(t * E + e)] += w.gate_bias[e];

  // 2. Routing.
  route_tokens(w, s.logits.data(), token_ids, n, &s.routing);

  // 3. Groups: a counting sort of the (token, slot) pairs by expert, so each
  // group lists its tokens in token order and groups run in expert order.
  s.counts.assign(size_t(E), 0);
  for (int32_t e : s.routing.experts) ++s.counts[size_t(e)];
  s.groups.clear();
  s.tokens.resize(size_t(n * K));
  s.alphas.resize(size_t(n * K));
  {
    std::vector<int32_t>& offset = s.counts;  // becomes each expert's fill position
    int64_t at = 0;
    for (int64_t e = 0; e < E; ++e) {
      const int32_t c = offset[size_t(e)];
      offset[size_t(e)] = int32_t(at);
      if (c == 0) continue;
      Group g = make_group(k, w.experts[size_t(e)]);
      g.first = at;
      g.count = c;
      s.groups.push_back(g);
      at += c;
    }
    for (int64_t t = 0; t < n; ++t)
      for (int64_t j = 0; j < K; ++j) {
        const int32_t e = s.routing.experts[size_t(t * K + j)];
        const int32_t pos = offset[size_t(e)]++;
        s.tokens[size_t(pos)] = int32_t(t);
        s.alphas[size_t(pos)] = s.routing.weights[size_t(t * K + j)];
      }
  }
  if (w.has_shared) {
    Group g = make_group(k, w.shared);
    g.count = n;
    g.shared = true;
    s.groups.push_back(g);
  }

  // x of the batch, once per activation layout the groups need (a group's
  // layout may depend on its token count: the AMX kernels).
  for (bool& r : s.x_ready) r = false;
  for (Group& g : s.groups) {
    const int c = int(k.acts_class(g.w1.kind, g.count));
    if (!s.x_ready[c]) {
      s.x_prepared[c] = cpu::prepare_acts(k, ActsClass(c), x, n, D, s.x_acts[c], pool);
      s.x_ready[c] = true;
    }
    g.x = s.x_prepared[c];
    g.x.n = g.count;
    g.x.token_index = g.shared ? nullptr : s.tokens.data() + g.first;
  }

  // h and u buffers, and where each group's prepared h goes.
  int64_t hu_floats = 0, h_bytes = 0;
  for (const Group& g : s.groups) {
    hu_floats += (g.fused ? 3 : 2) * g.count * I;  // h and u [I] each; fused: h [I] + gate_up [2I]
    h_bytes += g.count * k.acts_stride(k.acts_class(g.w2.kind, g.count), I);
  }
  float* hu = reinterpret_cast<float*>(s.hu.get(size_t(hu_floats) * sizeof(float)));
  uint8_t* hp = s.h_acts.get(size_t(h_bytes));
  for (Group& g : s.groups) {
    g.h = hu;
    g.u = hu + g.count * I;
    hu += (g.fused ? 3 : 2) * g.count * I;
    const ActsClass c = k.acts_class(g.w2.kind, g.count);
    g.hp = PreparedActs{hp, k.acts_stride(c, I), g.count, nullptr, c, cpu::new_acts_epoch()};
    g.hp_out = hp;
    hp += g.count * g.hp.stride;
  }

  // 4. Phase A: gate and up projections and the clamped SwiGLU, by blocks
  // of rows of every group's w1 / w3.
  const int64_t a_chunk = cpu::row_chunk(I, threads);
  const int64_t a_per_group = (I + a_chunk - 1) / a_chunk;
  const int64_t n_groups = int64_t(s.groups.size());
  const float limit = w.swiglu_limit, alpha = w.swiglu_alpha;
  cpu::parallel_items(pool, n_groups * a_per_group, [&](int64_t item, int) {
    const Group& g = s.groups[size_t(item / a_per_group)];
    const int64_t r0 = (item % a_per_group) * a_chunk, r1 = std::min(I, r0 + a_chunk);
    if (g.fused) {
      // Channels [r0, r1) are gate_up rows [2 r0, 2 r1): whole gate / up pairs.
      k.linear_rows(g.w13, 2 * r0, 2 * r1, g.x, RowsOut{g.u, 2 * I, nullptr, false, nullptr});
      for (int64_t t = 0; t < g.count; ++t) {
        const float* gu = g.u + t * 2 * I;
        float* h = g.h + t * I;
        for (int64_t i = r0; i < r1; ++i) {
          float gate = gu[2 * i] + (g.b13 ? g.b13[2 * i] : 0.0f);
          float up = gu[2 * i + 1] + (g.b13 ? g.b13[2 * i + 1] : 0.0f);
          if (limit > 0) {
            gate = std::min(gate, limit);
            up = std::clamp(up, -limit, limit);
          }
          h[i] = (up + 1.0f) * (gate * (1.0f / (1.0f + std::exp(-(gate * alpha)))));
        }
      }
      return;
    }
    k.linear_rows(g.w1, r0, r1, g.x, RowsOut{g.h, I, nullptr, false, nullptr});
    k.linear_rows(g.w3, r0, r1, g.x, RowsOut{g.u, I, nullptr, false, nullptr});
    for (int64_t t = 0; t < g.count; ++t) k.swiglu(g.h + t * I + r0, g.u + t * I + r0, r1 - r0, limit);
  });

  // h as the down projections want it.
  cpu::parallel_items(pool, n_groups, [&](int64_t i, int) {
    const Group& g = s.groups[size_t(i)];
    k.prepare_acts(g.hp.cls, g.h, g.count, I, g.hp_out);
  });

  // 5. Phase B: down projections, weighted and summed into y by blocks of
  // output rows; within a block the groups are added in expert order, then
  // the shared expert, as HF sums them.
  std::memset(y, 0, size_t(n * D) * sizeof(float));
  const int64_t b_chunk = cpu::row_chunk(D, threads);
  cpu::parallel_items(pool, (D + b_chunk - 1) / b_chunk, [&](int64_t item, int) {
    const int64_t r0 = item * b_chunk, r1 = std::min(D, r0 + b_chunk);
    for (const Group& g : s.groups) {
      const RowsOut out{y, D, g.shared ? nullptr : s.alphas.data() + g.first, true,
                        g.shared ? nullptr : s.tokens.data() + g.first};
      k.linear_rows(g.w2, r0, r1, g.hp, out);
      if (g.b2)
        for (int64_t j = 0; j < g.count; ++j) {
          const int64_t t = g.shared ? j : s.tokens[size_t(g.first + j)];
          const float a = g.shared ? 1.0f : s.alphas[size_t(g.first + j)];
          float* yt = y + t * D;
          for (int64_t r = r0; r < r1; ++r) yt[r] += a * g.b2[r];
        }
    }
  });
}

namespace {

void moe_simd(CpuIsa isa, Fp4Acts acts, const MoeWeights& w, const float* x, const int32_t* token_ids,
              int64_t n, float* y, ThreadPool* pool) {
  moe_with_kernels(cpu::isa_kernels(isa, acts), w, x, token_ids, n, y, pool);
}

}  // namespace

void moe_avx2(const MoeWeights& w, const float* x, const int32_t* token_ids, int64_t n, float* y,
              ThreadPool* pool) {
  moe_simd(CpuIsa::avx2, Fp4Acts::f32, w, x, token_ids, n, y, pool);
}

void moe_avx512(const MoeWeights& w, const float* x, const int32_t* token_ids, int64_t n, float* y,
                ThreadPool* pool) {
  moe_simd(CpuIsa::avx512, Fp4Acts::f32, w, x, token_ids, n, y, pool);
}

void moe_avx2_int8(const MoeWeights& w, const float* x, const int32_t* token_ids, int64_t n, float* y,
                   ThreadPool* pool) {
  moe_simd(CpuIsa::avx2, Fp4Acts::int8, w, x, token_ids, n, y, pool);
}

void moe_avx512_int8(const MoeWeights& w, const float* x, const int32_t* token_ids, int64_t n, float* y,
                     ThreadPool* pool) {
  moe_simd(CpuIsa::avx512, Fp4Acts::int8, w, x, token_ids, n, y, pool);
}

void moe_avx2_int16(const MoeWeights& w, const float* x, const int32_t* token_ids, int64_t n, float* y,
                    ThreadPool* pool) {
  moe_simd(CpuIsa::avx2, Fp4Acts::int16, w, x, token_ids, n, y, pool);
}

void moe_avx512_amx(const MoeWeights& w, const float* x, const int32_t* token_ids, int64_t n, float* y,
                    ThreadPool* pool) {
  moe_simd(CpuIsa::avx512, Fp4Acts::bf16x3, w, x, token_ids, n, y, pool);
}

MoeFn moe_for_isa(CpuIsa isa, Fp4Acts acts) {
  const bool int8 = acts == Fp4Acts::int8;
  if (acts == Fp4Acts::bf16x3 && isa != CpuIsa::ref) return isa == CpuIsa::avx512 ? moe_avx512_amx : nullptr;
  if (acts == Fp4Acts::int16 && isa != CpuIsa::ref) return isa == CpuIsa::avx2 ? moe_avx2_int16 : nullptr;
  switch (isa) {
    case CpuIsa::ref: return moe_ref;
    case CpuIsa::avx2: return int8 ? moe_avx2_int8 : moe_avx2;
    case CpuIsa::avx512: return int8 ? moe_avx512_int8 : moe_avx512;
  }
  return moe_ref;
}

}  // namespace nibble
