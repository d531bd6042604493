#include "cli/load_flags.h"

#include <cstdio>
#include <filesystem>
#include <unistd.h>

#include "cli/text_generation.h"
#include "cli/usage_error.h"
#include "device/cuda_device.h"
#include "device/device.h"
#include "kernels/registry.h"
#include "util/thread_pool.h"

namespace nibble::cli {

std::vector<OptionSpec> model_load_options() {
  return {
      {"-m,--model", "DIR", "the model folder (instead of the MODEL_DIR argument)"},
      {"-t,--threads", "N", "CPU threads (default: all)"},
      {"--device", "NAME", "where the model runs: host (this machine's CPU, the default) or cuda / cuda:N "
                           "(a GPU; DeepSeek-V4 models)"},
      {"--moe-backend", "NAME", "force the routed-experts kernel (default auto)"},
      {"--linear-backend", "NAME", "force the kernel of the other matrix ops (default auto)"},
      {"--bandwidth", "GBPS",
       "memory bandwidth the planner assumes (default: not measured; it does not change the CPU plan)"},
      {"--no-check-weights", "", "skip the load-time check for NaN scale codes in the weights"},
      {"--no-cuda-graphs", "", "on a GPU, launch every kernel of a decode step by itself instead of as one CUDA graph"},
      {"--profile", "", "time every phase of the forward steps and print the table at the end (stderr)"},
  };
}

std::string model_dir_arg(const ParsedArgs& args, bool shipped_default, const std::string& usage) {
  std::string dir;
  if (args.has("--model")) {
    if (!args.positional.empty())
      usage_fail("give the model once: -m/--model ", args.str("--model"), " and the argument '", args.positional[0],
                 "' (usage: ", usage, ")");
    dir = args.str("--model");
  } else if (args.positional.size() > 1) {
    usage_fail("expected at most one MODEL_DIR, got ", args.positional.size(), " arguments (usage: ", usage, ")");
  } else if (args.positional.size() == 1) {
    dir = args.positional[0];
  } else if (shipped_default) {
    dir = shipped_model_dir();
    if (!std::filesystem::exists(dir)) fail("no MODEL_DIR given and the shipped model ", dir, " is missing");
    return dir;
  } else {
    usage_fail("expected a MODEL_DIR (usage: ", usage, ")");
  }
  std::error_code ec;
  if (std::filesystem::is_regular_file(dir, ec))
    usage_fail("MODEL_DIR ", dir, " is a file; give the model folder that holds config.json and the "
               ".safetensors shards (`nibble inspect` reads a single file)");
  return dir;
}

void check_backend_name(const std::string& flag, const std::string& name, bool is_moe) {
  if (name == "auto") return;
  std::string known;
  for (const auto& k : kernel_registry()) {
    if ((k.op == Op::moe) != is_moe) continue;
    if (name == k.name) return;
    known += std::string(known.empty() ? "" : ", ") + k.name;
  }
  usage_fail("flag ", flag, ": no such ", is_moe ? "moe" : "linear", " kernel '", name, "' (known: auto, ", known,
             ")");
}

int threads_arg(const ParsedArgs& args) {
  const int threads = int(args.integer("--threads", 0, 0, 4096));
  const int hw = ThreadPool::hardware_threads();
  if (threads > hw)
    std::fprintf(stderr,
                 "[nibble] warning: --threads %d is more than the %d hardware threads of this machine; "
                 "the extra threads only take turns\n",
                 threads, hw);
  return threads;
}

std::string device_arg(const ParsedArgs& args) {
  const std::string name = args.str("--device", "host");
  if (name == "host" || is_cuda_device_spec(name)) return name;
  for (const std::string& planned : named_device_list())
    if (name == planned)
      usage_fail("flag --device: ", name, " is a device to plan for (`nibble explain --device ", name,
                 "`), not one of this machine's: run on host, cuda or cuda:N");
  usage_fail("flag --device: unknown device '", name, "' (host, cuda, cuda:N)");
}

EngineOptions engine_options(const ParsedArgs& args) {
  EngineOptions opt;
  opt.device = device_arg(args);
  opt.threads = threads_arg(args);
  opt.moe_backend = args.str("--moe-backend", "auto");
  opt.linear_backend = args.str("--linear-backend", "auto");
  check_backend_name("--moe-backend", opt.moe_backend, true);
  check_backend_name("--linear-backend", opt.linear_backend, false);
  opt.bandwidth_gbps = args.number("--bandwidth", kUnmeasuredBandwidthGbps, 0.001, 1e6);
  opt.profile = args.has("--profile");
  opt.check_weights = !args.has("--no-check-weights");
  opt.cuda_graphs = !args.has("--no-cuda-graphs");
  return opt;
}

ProgressBar::Mode load_progress_mode() {
  return ::isatty(STDERR_FILENO) ? ProgressBar::Mode::terminal : ProgressBar::Mode::quiet;
}

void show_load_progress(EngineOptions& opt, ProgressBar& bar) {
  constexpr uint64_t kMinBytes = uint64_t(1) << 30;
  opt.on_progress = [&bar](uint64_t done, uint64_t total) {
    if (total >= kMinBytes) bar.update("load", done, total);
  };
  opt.on_upload_progress = [&bar](uint64_t done, uint64_t total) {
    if (total >= kMinBytes) bar.update("upload", done, total);
  };
}

}  // namespace nibble::cli
