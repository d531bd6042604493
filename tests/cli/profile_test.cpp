// --profile (the flag that replaced NIBBLE_PROFILE): off by default, and
// with it the phase table on stderr whose per-step times add up.
#include <gtest/gtest.h>

#include <cstdlib>
#include <sstream>

#include "cli_util.h"

namespace nibble::testing {
namespace {

TEST(Profile, FlagPrintsThePhaseTable) {
  RunResult off = run_nibble({"run", "-p", "ROMEO.", "-n", "4", "--temp", "0"});
  ASSERT_EQ(off.exit_code, 0) << off.err;
  EXPECT_EQ(off.err.find("[nibble profile]"), std::string::npos) << off.err;

  RunResult on = run_nibble({"run", "-p", "ROMEO.", "-n", "4", "--temp", "0", "--profile"});
  ASSERT_EQ(on.exit_code, 0) << on.err;
  EXPECT_EQ(on.out, off.out);  // profiling changes no result
  // 1 prefill step, then 3 decode steps (the 4th token is sampled, not fed).
  EXPECT_NE(on.err.find("[nibble profile] decode steps: 3 steps, 3 tokens"), std::string::npos) << on.err;
  EXPECT_NE(on.err.find("[nibble profile] prefill and mixed steps: 1 steps"), std::string::npos) << on.err;
  // The top-level phases of the decode block sum to the total it states.
  std::istringstream lines(on.err.substr(on.err.find("decode steps")));
  std::string line;
  std::getline(lines, line);
  const double per_step = std::atof(line.substr(line.find("s in the phases below (") + 23).c_str());
  double sum = 0;
  while (std::getline(lines, line) && line.rfind("[nibble profile]   ", 0) == 0) {
    if (line.rfind("[nibble profile]     ", 0) == 0) continue;  // nested parts of attention
    std::istringstream f(line.substr(19));
    std::string name;
    double ms = 0;
    f >> name >> ms;
    sum += ms;
  }
  EXPECT_NEAR(sum, per_step, 0.002 * 10) << on.err;  // ten rows printed to 0.001 ms each
}

}  // namespace
}  // namespace nibble::testing
