// ForwardProfile's phases: time adds up per step kind, and a device
// backend's barrier runs at every phase's start and end (so a profiled GPU
// step shows device time) and is named in the report.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <thread>

#include "model/forward_profile.h"

namespace nibble {
namespace {

TEST(ForwardProfile, BarriersBracketEveryPhaseAndAreReported) {
  ForwardProfile p;
  int waits = 0;
  p.set_barrier([&] { ++waits; });
  p.begin_step(true, 1);
  {
    PhaseTimer outer(&p, Phase::attention);
    PhaseTimer inner(&p, Phase::attn_core);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_EQ(waits, 4);
  const std::string r = p.report();
  EXPECT_NE(r.find("decode steps: 1 steps, 1 tokens"), std::string::npos) << r;
  EXPECT_NE(r.find("device time: each phase waited for the GPU"), std::string::npos) << r;
  // A barrier that throws at a phase's end (a failed kernel) does not
  // escape the timer's destructor: the backend's next check reports it.
  int calls = 0;
  p.set_barrier([&] {
    if (++calls == 2) throw std::runtime_error("kernel failed");
  });
  EXPECT_NO_THROW({ PhaseTimer t(&p, Phase::moe); });
  EXPECT_EQ(calls, 2);
  p.set_barrier(nullptr);
  { PhaseTimer t(&p, Phase::moe); }
  EXPECT_EQ(p.report().find("device time"), std::string::npos);
}

}  // namespace
}  // namespace nibble
