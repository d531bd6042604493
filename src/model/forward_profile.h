// Where a forward pass spends its time, by phase (attention projections,
// attention itself, compressor, indexer, MoE, hyper-connections, head, ...):
// set NIBBLE_PROFILE=1 in the environment and every process that runs a
// model prints, at exit, the wall time of each phase summed over its decode
// steps (single-token forwards) and, apart, over its prefill chunks. Off by
// default; when off a PhaseTimer costs one predictable branch.
//
// Phases nest: `attention` includes `attn_linear`, `compressor`, `indexer`
// and `attn_core`; the report lists the remainder of each parent as `other`.
// Times are wall-clock on the calling thread (the thread pool's work runs
// inside them), so they add up to the forward's wall time.
#pragma once

#include <chrono>
#include <cstdint>

namespace nibble {

enum class Phase : int {
  embed,
  hc,           // hc_pre / hc_post / hc_head mixing
  norm,         // RMSNorm before each sublayer and before the head
  attention,    // the whole attention sublayer:
  attn_linear,  //   wq_a, wq_b, wkv, wo_a, wo_b
  compressor,   //   CSA/HCA KV compressor
  indexer,      //   Lightning Indexer (CSA)
  attn_core,    //   scores, softmax, weighted sum over the visible keys
  moe,          // router + routed experts + shared expert (one fused kernel)
  head,         // lm head matrix
  count
};

bool forward_profile_enabled();

// Marks the forward that follows as a decode step (one token) or a prefill chunk.
void forward_profile_begin(int64_t tokens);

class PhaseTimer {
 public:
  explicit PhaseTimer(Phase p) : phase_(p), on_(forward_profile_enabled()) {
    if (on_) t0_ = std::chrono::steady_clock::now();
  }
  ~PhaseTimer();
  PhaseTimer(const PhaseTimer&) = delete;
  PhaseTimer& operator=(const PhaseTimer&) = delete;

 private:
  Phase phase_;
  bool on_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace nibble
