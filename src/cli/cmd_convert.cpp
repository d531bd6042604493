// `nibble convert SRC DST --to nvfp4|mxfp4`: a new checkpoint with the routed
// experts in another FP4 format (src/convert/convert.h, docs/convert.md).
// This file owns what only a command line has: flags, signals, the progress
// bar and the report.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/usage_error.h"
#include "cli/command.h"
#include "cli/human.h"
#include "convert/cancel.h"
#include "convert/convert.h"
#include "convert/progress.h"
#include "util/error.h"

namespace nibble::cli {
namespace {

const std::vector<OptionSpec> kOptions = {
    {"--to", "FORMAT", "expert format to write: nvfp4 or mxfp4 (required)"},
    {"--force", "", "replace a non-empty DST; the old one is swapped out only after the new one is complete"},
    {"--mtp-experts", "MODE",
     "MTP block experts: auto (default: keep FP4 ones as they are, like NVIDIA's NVFP4 release; "
     "quantize BF16 ones), keep, or convert"},
    {"--threads", "N", "threads converting expert rows of each shard being written (default 2)"},
    {"--jobs", "N",
     "shards written at once (default 2, one per core on the usual machine; 1 for a spinning disk)"},
    {"--json", "", "print the report as one JSON object on stdout"},
    {"--quiet", "", "no progress on stderr"},
};

const char* kDescription =
    "Writes a copy of the DeepSeek-V4 style or gpt-oss checkpoint SRC to DST with its routed\n"
    "experts in another FP4 format. Every other tensor is copied byte for byte, the shards keep\n"
    "the source's names, and config.json, hf_quant_config.json and the index are written\n"
    "for the new format; every other file (tokenizer, generation config, ...) is copied.\n"
    "\n"
    "  MXFP4 -> NVFP4  lossless for every block within E4M3's 2^17 range of its tensor\n"
    "                  (w1/w3 share weight_scale_2); other blocks are re-quantized and\n"
    "                  counted. Metadata: ModelOpt's current schema.\n"
    "  NVFP4 -> MXFP4  re-quantization, lossy in general: the error is reported.\n"
    "                  Metadata: DeepSeek's expert_dtype \"fp4\".\n"
    "  BF16  -> either round-to-nearest quantization (docs/formats.md).\n"
    "  gpt-oss: the stacked MXFP4 *_blocks / *_scales to per-expert NVFP4 tensors\n"
    "                  (ModelOpt's per-module names; the lossless cast per expert), and\n"
    "                  back to the stacked layout byte for byte.\n"
    "\n"
    "NVFP4 .input_scale: a data-free bound on the activation, not a calibrated value\n"
    "(see docs/convert.md); W4A16 kernels ignore it.\n"
    "\n"
    "Safety: SRC is only read. The output is built in a hidden folder beside DST and\n"
    "renamed into place after every shard was written, flushed and read back against a\n"
    "checksum; an error or Ctrl-C (SIGINT/SIGTERM/SIGHUP) leaves neither DST nor the\n"
    "temporary folder. A non-empty DST is refused without --force.\n"
    "\n"
    "Exit status: 0 done, 1 error, 2 bad usage, 128+N interrupted by signal N.";

// The only global: a signal handler can do nothing but set a flag.
std::atomic<int> g_signal{0};

extern "C" void on_signal(int sig) {
  if (g_signal.load() != 0) {  // a second Ctrl-C: stop at once (a later run removes the leftovers)
    ::signal(sig, SIG_DFL);
    ::raise(sig);
    return;
  }
  g_signal.store(sig);
}

void install_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a blocked read or write returns and the flag is seen
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
  // A file size limit (ulimit -f) must be an error message, not a kill.
  ::signal(SIGXFSZ, SIG_IGN);
}

nlohmann::json stats_json(const ExpertStats& s) {
  return {{"blocks", s.blocks},
          {"blocks_exact", s.exact},
          {"blocks_lossy", s.blocks - s.exact},
          {"blocks_requantized", s.requantized},
          {"max_abs_error", s.max_abs_error}};
}

nlohmann::json report_json(const ConvertReport& r) {
  nlohmann::json ops = nlohmann::json::array();
  for (const auto& o : r.ops) {
    nlohmann::json j = stats_json(o.stats);
    j["op"] = expert_op_name(o.op);
    j["block_elements"] = expert_op_block(o.op);
    j["tensors"] = o.tensors;
    j["max_error_tensor"] = o.max_error_tensor;
    ops.push_back(j);
  }
  nlohmann::json j = {
      {"src", r.src},
      {"dst", r.dst},
      {"target", format_name(r.target)},
      {"tensors_in", r.tensors_in},
      {"tensors_out", r.tensors_out},
      {"tensors_copied", r.tensors_copied},
      {"experts_converted", r.experts_converted},
      {"experts_kept", r.experts_kept},
      {"mtp_experts_kept", r.mtp_experts_kept},
      {"ops", ops},
      {"total", stats_json(r.total)},
      {"max_error_tensor", r.max_error_tensor},
      {"shards", r.shards},
      {"bytes_in", r.bytes_in},
      {"bytes_out", r.bytes_out},
      {"other_files", r.other_files},
      {"other_bytes", r.other_bytes},
      {"metadata_written", r.written_metadata},
      {"quantized_layers", r.quantized_layers},
      {"exclude_modules", r.exclude_modules},
      {"replaced_existing", r.replaced_existing},
      {"scan_seconds", r.scan_seconds},
      {"seconds", r.seconds},
      {"write_bytes_per_s", r.seconds > 0 ? double(r.bytes_out) / r.seconds : 0.0},
      {"read_bytes_per_s", r.seconds > 0 ? double(r.bytes_in) / r.seconds : 0.0},
      {"warnings", r.warnings},
  };
  return j;
}

void print_report(const ConvertReport& r) {
  std::printf("converted %s -> %s (experts to %s)%s\n", r.src.c_str(), r.dst.c_str(), format_name(r.target),
              r.replaced_existing ? ", replacing the old DST" : "");
  std::printf("  experts   %lld matrices converted, %lld kept as they were (%lld in the MTP block)\n",
              (long long)r.experts_converted, (long long)r.experts_kept, (long long)r.mtp_experts_kept);
  for (const auto& o : r.ops) {
    const ExpertStats& s = o.stats;
    std::printf("  %-13s %lld matrices, %lld blocks of %lld: %lld exact, %lld re-quantized, %lld lossy; "
                "max abs error %.6g%s%s\n",
                expert_op_name(o.op), (long long)o.tensors, (long long)s.blocks, (long long)expert_op_block(o.op),
                (long long)s.exact, (long long)s.requantized, (long long)(s.blocks - s.exact), s.max_abs_error,
                o.max_error_tensor.empty() ? "" : " in ", o.max_error_tensor.c_str());
  }
  std::printf("  tensors   %lld in, %lld out in %d shard(s); %lld copied byte for byte\n", (long long)r.tensors_in,
              (long long)r.tensors_out, r.shards, (long long)r.tensors_copied);
  std::printf("  bytes     %s of tensors read, %s of shards written; %lld other file(s), %s\n",
              human_bytes(double(r.bytes_in)).c_str(), human_bytes(double(r.bytes_out)).c_str(),
              (long long)r.other_files, human_bytes(double(r.other_bytes)).c_str());
  std::printf("  metadata  ");
  for (size_t i = 0; i < r.written_metadata.size(); ++i)
    std::printf("%s%s", i ? ", " : "", r.written_metadata[i].c_str());
  if (!r.quantized_layers.empty()) std::printf(" (%zu NVFP4 expert modules)", r.quantized_layers.size());
  std::printf("\n  time      %.2f s (scan %.2f s); %s/s written, %s/s read\n", r.seconds, r.scan_seconds,
              human_bytes(r.seconds > 0 ? double(r.bytes_out) / r.seconds : 0).c_str(),
              human_bytes(r.seconds > 0 ? double(r.bytes_in) / r.seconds : 0).c_str());
  for (const auto& w : r.warnings) std::printf("  warning: %s\n", w.c_str());
}

int run_convert(const std::vector<std::string>& argv) {
  ParsedArgs args = parse_args(argv, kOptions);
  const std::string usage = "nibble convert SRC DST --to nvfp4|mxfp4 [--force] [--mtp-experts MODE] [--jobs N] [--json]";
  if (args.help) {
    std::cout << format_help(usage, kDescription, kOptions);
    return 0;
  }
  if (args.positional.size() != 2) usage_fail("expected SRC and DST (usage: ", usage, ")");
  ConvertOptions opt;
  opt.src = args.positional[0];
  opt.dst = args.positional[1];
  const std::string to = args.str("--to");
  if (to.empty()) usage_fail("--to is required: nvfp4 or mxfp4");
  if (to == "nvfp4") opt.target = Format::nvfp4;
  else if (to == "mxfp4") opt.target = Format::mxfp4;
  else usage_fail("--to ", to, ": expected nvfp4 or mxfp4");
  const std::string mtp = args.str("--mtp-experts", "auto");
  if (mtp == "auto") opt.mtp = MtpExperts::auto_;
  else if (mtp == "keep") opt.mtp = MtpExperts::keep;
  else if (mtp == "convert") opt.mtp = MtpExperts::convert;
  else usage_fail("--mtp-experts ", mtp, ": expected auto, keep or convert");
  opt.force = args.has("--force");
  opt.threads = int(args.integer("--threads", 2, 1, 256));
  opt.jobs = int(args.integer("--jobs", 2, 1, 64));

  install_signal_handlers();
  opt.cancel = &g_signal;
  ProgressBar::Mode mode = args.has("--quiet")       ? ProgressBar::Mode::quiet
                           : ::isatty(STDERR_FILENO) ? ProgressBar::Mode::terminal
                                                     : ProgressBar::Mode::lines;
  ProgressBar bar(stderr, mode);
  opt.on_progress = [&](const ConvertProgress& p) { bar.update(p.phase, p.done, p.total); };

  ConvertReport report;
  try {
    report = convert_checkpoint(opt);
  } catch (const Interrupted& e) {
    bar.finish();
    std::fprintf(stderr, "nibble convert: %s; %s was not written and SRC is unchanged\n", e.what(), opt.dst.c_str());
    return 128 + e.signal_number();
  } catch (const Error& e) {
    bar.finish();
    fail(e.what(), " (nothing was written: DST is as it was and SRC is unchanged)");
  }
  bar.finish();
  if (args.has("--json")) std::cout << report_json(report).dump(2) << "\n";
  else print_report(report);
  return 0;
}

RegisterCommand reg({"convert", "write a copy of a checkpoint with its experts in another FP4 format", run_convert});

}  // namespace
}  // namespace nibble::cli
