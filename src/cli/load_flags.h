// The flags of every command that loads a model (run, chat, logits, kld,
// tokenize): where the model is (MODEL_DIR or -m/--model) and how it is
// planned (-t/--threads, --device, --moe-backend, --linear-backend, --bandwidth).
//
// Bandwidth: these commands do not measure it. The planner's choice among
// the CPU kernels does not depend on it (each exact SIMD kernel is ahead of
// cpu_ref in both its bandwidth and its compute efficiency, so it is the
// cheaper one at any bandwidth; tests/cli/bandwidth_probe_test.cpp checks
// this), and the probe cost every start 0.6-2.5 s and ~530 MB. Only `explain`
// (its tokens/s bound) and `bench` (its ratios) measure, and say so.
#pragma once

#include <string>
#include <vector>

#include "cli/args.h"
#include "convert/progress.h"
#include "nibble/engine.h"

namespace nibble::cli {

// The bandwidth the planner is told when nobody measured it: it only scales
// the cost estimates shown by `explain` (which measures instead).
inline constexpr double kUnmeasuredBandwidthGbps = 10.0;

// -m/--model, -t/--threads, --device, --moe-backend, --linear-backend, --bandwidth, --profile.
std::vector<OptionSpec> model_load_options();

// The model folder: -m/--model or the one positional argument. With neither,
// the shipped model if `shipped_default`, else a usage error. Two of them,
// or a path that is a file rather than a folder, are usage errors.
std::string model_dir_arg(const ParsedArgs& args, bool shipped_default, const std::string& usage);

// EngineOptions from the flags. Unknown kernel names are usage errors (exit
// 2); more threads than the machine has is allowed but warned about.
EngineOptions engine_options(const ParsedArgs& args);

// How a command's load progress shows: a bar when stderr is a terminal,
// nothing in logs and pipes (serve, whose stderr is a log, writes lines).
ProgressBar::Mode load_progress_mode();

// Draws `bar` while a model of 1 GiB or more binds and checks its weights
// ("load") and, on a GPU, while they are copied there ("upload"); nothing
// for smaller models, which load too fast for it to help.
void show_load_progress(EngineOptions& opt, ProgressBar& bar);

// -t/--threads checked the same way (for commands that plan without loading).
int threads_arg(const ParsedArgs& args);

// --device: host (default), cuda or cuda:N; the planning-only names
// (sm_90, cpu-avx2, ...) and unknown ones are usage errors.
std::string device_arg(const ParsedArgs& args);

// Throws UsageError unless `name` is "auto" or a registry kernel of `op`.
void check_backend_name(const std::string& flag, const std::string& name, bool is_moe);

}  // namespace nibble::cli
