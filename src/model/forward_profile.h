// Where a forward step spends its time, by phase (attention projections,
// attention itself, compressor, indexer, MoE, hyper-connections, head, ...):
// load a model with LoadOptions::profile (the `--profile` flag of every
// command that loads one) and it prints, when it is destroyed, the wall time
// of each phase summed over its decode steps (every sequence feeding one
// token) and, apart, over its other steps (prefill chunks, mixed batches).
// Off by default; a PhaseTimer with no profile costs one predictable branch.
//
// Phases nest: `attention` includes `attn_linear`, `compressor`, `indexer`
// and `attn_core`; the report lists the remainder of each parent as `other`.
// Times are wall-clock on the thread that runs the step (the thread pool's
// work runs inside them), so they add up to the step's wall time. A model
// runs one step at a time, so the totals need no synchronisation.
//
// A device backend launches asynchronously, so its wall time would be
// launch time. It sets a barrier (wait for the device) that every phase
// calls at its start and end: the phases then hold the device's time, plus
// a synchronisation each (the profiled step is slower than an unprofiled
// one; the difference is what launching asynchronously hides).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <utility>

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

class ForwardProfile {
 public:
  // The step that follows: a decode step (one token per sequence) or not.
  void begin_step(bool decode, int64_t tokens);
  void add(Phase p, int64_t ns) { ns_[size_t(row_)][size_t(p)] += ns; }
  // The per-phase table, one line per phase ("" before any step).
  std::string report() const;
  // Called at every phase's start and end (null: none). The backend that
  // sets it clears it before it goes.
  void set_barrier(std::function<void()> barrier) { barrier_ = std::move(barrier); }
  void wait() const {
    if (barrier_) barrier_();
  }

 private:
  static constexpr int kPhases = int(Phase::count);
  int row_ = 0;  // 0: decode steps, 1: the others
  std::array<std::array<int64_t, kPhases>, 2> ns_{};
  std::array<int64_t, 2> steps_{}, tokens_{};
  std::function<void()> barrier_;
};

class PhaseTimer {
 public:
  PhaseTimer(ForwardProfile* profile, Phase p) : profile_(profile), phase_(p) {
    if (!profile_) return;
    profile_->wait();
    t0_ = std::chrono::steady_clock::now();
  }
  ~PhaseTimer() {
    if (!profile_) return;
    try {
      profile_->wait();
    } catch (const std::exception&) {
      // A failed kernel: the backend's next check reports it.
    }
    profile_->add(phase_,
                  std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0_).count());
  }
  PhaseTimer(const PhaseTimer&) = delete;
  PhaseTimer& operator=(const PhaseTimer&) = delete;

 private:
  ForwardProfile* profile_;
  Phase phase_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace nibble
