// `nibble bench decode`: the model-level benchmark (like llama-bench) of
// batched decode over the public Engine API.
#pragma once

#include <string>
#include <vector>

namespace nibble::cli {

// args: everything after `bench decode`.
int bench_decode(const std::vector<std::string>& args);

}  // namespace nibble::cli
