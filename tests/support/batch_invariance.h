// Batch invariance, checked the same way for every architecture: the
// sequences fed in random mixed batches (each step a random subset, each
// sequence a random chunk of 1-9 tokens, the batch shuffled) give every
// position's logits bitwise equal to the sequence fed alone in one call.
#pragma once

#include <cstdint>
#include <vector>

namespace nibble {
class Model;
}

namespace nibble::test {

// Adds a gtest failure per sequence whose logits differ.
void expect_random_batches_equal_alone(const Model& m, const std::vector<std::vector<int32_t>>& seqs,
                                       uint32_t seed = 77);

}  // namespace nibble::test
