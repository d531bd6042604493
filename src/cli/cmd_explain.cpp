// `nibble explain MODEL_DIR`: the plan — every tensor group's format and
// where it came from, the kernel chosen for it on the device and every
// rejected alternative with its reason, bytes read per decoded token and the
// bandwidth-bound tokens/s.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"
#include "checkpoint/detect.h"
#include "cli/args.h"
#include "runtime/speculative.h"
#include "cli/usage_error.h"
#include "cli/command.h"
#include "cli/load_flags.h"
#include "cli/human.h"
#include "device/cuda_device.h"
#include "kernels/plan.h"
#include "nibble/engine.h"
#include "runtime/plan_checkpoint.h"
#include "util/error.h"

namespace nibble::cli {
namespace {

// Whether speculative decoding runs and why (docs/speculative.md): never by
// default (kDefaultDraftTokens, from the verify-cost measurement), and only
// with an MTP layer, which the plan sees as mtp.* parameters (its tensors are
// checked when the model loads; a broken set turns speculation off then).
std::string speculation_why(const Plan& plan) {
  if (plan.mtp_params == 0)
    return "The checkpoint has no MTP layer (mtp.* tensors), so it cannot: a draft needs one.";
  const bool v3 = plan.architecture == "DeepseekV3ForCausalLM";
  return std::string("The checkpoint has an MTP layer (") + human_count(double(plan.mtp_params)) +
         (v3 ? " parameters, model.layers.{num_hidden_layers}" : " parameters") + "), but " + kDefaultDraftWhy +
         " `nibble bench decode --spec-draft-tokens K` measures it here; GenerationParams::draft_tokens turns it on.";
}

const std::vector<OptionSpec> kOptions = {
    {"--device", "NAME", "plan for this device: host (default), cpu-avx2, cpu-avx512, sm_80, sm_90, sm_100, sm_120, cuda, cuda:N"},
    {"--json", "", "print one JSON object instead of a table"},
    {"--moe-backend", "NAME", "force the routed-experts kernel (default auto)"},
    {"--linear-backend", "NAME", "force the kernel of the other matrix ops (default auto)"},
    {"--batch", "N", "tokens per decode step to plan for (default 1)"},
    {"-t,--threads", "N", "CPU threads (default: all)"},
    {"--bandwidth", "GBPS", "memory bandwidth to assume instead of measuring it (host) or the nominal one"},
    {"--profile", "", "show the plan of a --profile run (the flag of every command that runs a model): profiling on"},
};

// --profile: the one switch that changes how the forward runs besides the
// kernels (model/forward_profile.h), shown so that nothing is hidden.
const char* profile_text(bool on) {
  return on ? "on: every forward step is timed by phase; the table goes to stderr at the end"
            : "off (--profile times every phase of the forward and prints the table on stderr)";
}

// Groups that need a kernel and have none on the device.
std::vector<const GroupPlan*> unplanned_groups(const Plan& plan) {
  std::vector<const GroupPlan*> out;
  for (const auto& g : plan.groups)
    if (g.has_op && !g.selection.chosen) out.push_back(&g);
  return out;
}

uint64_t plan_stored_bytes(const Plan& plan) {
  uint64_t b = 0;
  for (const auto& g : plan.groups) b += g.bytes;
  return b;
}

nlohmann::json plan_json(const Plan& plan) {
  nlohmann::json groups = nlohmann::json::array();
  for (const auto& g : plan.groups) {
    nlohmann::json j = {{"group", g.group},        {"format", format_name(g.format)},
                        {"tensors", g.tensors},    {"bytes", g.bytes},
                        {"params", g.params},      {"bytes_per_token", g.bytes_per_token},
                        {"device_bytes", g.device_bytes}, {"provenance", g.provenance}};
    nlohmann::json rejected = nlohmann::json::array();
    if (g.has_op) {
      j["op"] = op_name(g.op);
      j["kernel"] = g.selection.chosen ? nlohmann::json(g.selection.chosen->name) : nlohmann::json(nullptr);
      if (g.selection.chosen) {
        j["kernel_units"] = kernel_unit_class(*g.selection.chosen);  // tensor_core, cuda_core, cpu_simd, scalar
        j["kernel_units_detail"] = g.selection.chosen->units;
        // What the kernel rounds beyond f32 sums (only a forced opt-in kernel).
        j["kernel_lossy"] = kernel_is_lossy(*g.selection.chosen, g.format)
                                ? nlohmann::json(g.selection.chosen->lossy)
                                : nlohmann::json(nullptr);
        j["why"] = g.selection.why;
        j["est_ms"] = g.selection.cost_s * 1e3;
      }
      for (const auto& r : g.selection.rejected) rejected.push_back({{"kernel", r.kernel}, {"reason", r.reason}});
    } else {
      j["kernel"] = nullptr;
    }
    j["rejected"] = rejected;
    if (!g.note.empty()) j["note"] = g.note;
    groups.push_back(j);
  }
  const Device& d = plan.device;
  return {
      {"model", {{"architecture", plan.architecture}, {"params", plan.params}, {"mtp_params", plan.mtp_params},
                 {"layers", plan.layers},
                 {"metadata_schema", plan.metadata_schema}}},
      {"device", {{"name", d.name}, {"kind", d.kind == DeviceKind::cpu ? "cpu" : "cuda"},
                  {"hypothetical", d.hypothetical}, {"description", d.description}, {"cores", d.cores},
                  {"sm", d.sm}, {"bandwidth_gbps", d.bandwidth_gbps}, {"bandwidth_source", d.bandwidth_source},
                  {"memory_bytes", d.memory_bytes}}},
      {"backend", plan.backend.empty() ? nlohmann::json(nullptr) : nlohmann::json(plan.backend)},
      {"groups", groups},
      {"bytes_per_token", plan.bytes_per_token},
      {"device_bytes", plan.device_bytes},
      {"bound_tokens_per_s", plan.bound_tokens_per_s},
      {"warnings", plan.warnings},
      {"speculative", {{"on", false}, {"mtp_layer", plan.mtp_params > 0}, {"why", speculation_why(plan)}}},
  };
}

void print_plan(const std::string& path, const Plan& plan, bool arch_runs, bool profile) {
  const Device& d = plan.device;
  std::printf("model     %s\n          %s, %lld layers, %s parameters (+ %s in MTP)\n", path.c_str(),
              plan.architecture.empty() ? "(no architecture in config.json)" : plan.architecture.c_str(),
              (long long)plan.layers, human_count(double(plan.params)).c_str(),
              human_count(double(plan.mtp_params)).c_str());
  std::printf("metadata  %s\n", plan.metadata_schema.c_str());
  std::printf("device    %s%s: %s\n          %d %s, %.1f GB/s read bandwidth (%s)\n\n", d.name.c_str(),
              d.hypothetical ? " (hypothetical)" : "", d.description.c_str(), d.cores,
              d.kind == DeviceKind::cpu ? (d.cores == 1 ? "thread" : "threads") : (d.cores == 1 ? "SM" : "SMs"),
              d.bandwidth_gbps, d.bandwidth_source.c_str());
  if (!arch_runs) {
    std::string runs;
    for (const auto& a : runnable_architectures()) runs += (runs.empty() ? "" : ", ") + a;
    std::printf("backend   none: nibble does not run %s yet (it runs %s); only its kernels are planned\n\n",
                plan.architecture.empty() ? "a model without an architecture" : plan.architecture.c_str(), runs.c_str());
  } else if (plan.backend.empty())
    std::printf("backend   none: nibble has no backend for %s yet; only its kernels are planned\n\n", d.name.c_str());
  else if (plan.architecture == "GptOssForCausalLM")
    std::printf("backend   %s: runs every op of the forward (embedding, norms, projections and biases, half-split\n"
                "          RoPE, grouped-query attention with sinks (sliding / full), MoE with expert biases, head)\n"
                "          with the kernels below\n\n",
                plan.backend.c_str());
  else if (plan.architecture == "DeepseekV3ForCausalLM")
    std::printf("backend   %s: runs every op of the forward (embedding, norms, projections, interleaved YaRN RoPE,\n"
                "          latent attention over a latent-only cache, dense MLP, group-limited MoE with shared\n"
                "          experts, head) with the kernels below\n\n",
                plan.backend.c_str());
  else if (plan.backend == "cuda")
    std::printf("backend   cuda: runs every op of the forward on %s (embedding, norms, hyper-connections,\n"
                "          projections, RoPE, window / compressed attention and indexer with every sequence's\n"
                "          caches in GPU memory, MoE routing and experts, head, sampling: only token ids come\n"
                "          back unless logits are asked for) with the kernels below; not yet run on a GPU\n"
                "          (docs/cuda.md)\n\n",
                d.name.c_str());
  else
    std::printf("backend   %s: runs every op of the forward (embedding, norms, hyper-connections, projections,\n"
                "          RoPE, window / compressed attention and indexer, MoE, head) with the kernels below\n\n",
                plan.backend.c_str());
  std::printf("profile   %s\n\n", profile_text(profile));
  std::printf("%-26s %-13s %8s %11s %11s  %s\n", "group", "format", "tensors", "bytes", "per token", "kernel");
  for (const auto& g : plan.groups) {
    std::string kernel = g.has_op ? (g.selection.chosen ? std::string(g.selection.chosen->name) + " (" + op_name(g.op) + ")"
                                                        : std::string("NONE (") + op_name(g.op) + ")")
                                  : "-";
    std::printf("%-26s %-13s %8lld %11s %11s  %s\n", g.group.c_str(), format_name(g.format), (long long)g.tensors,
                human_bytes(double(g.bytes)).c_str(), human_bytes(double(g.bytes_per_token)).c_str(), kernel.c_str());
    std::printf("    from: %s\n", g.provenance.c_str());
    if (g.has_op && g.selection.chosen) std::printf("    why:  %s\n", g.selection.why.c_str());
    for (const auto& r : g.selection.rejected) std::printf("    not %s: %s\n", r.kernel.c_str(), r.reason.c_str());
    if (!g.note.empty()) std::printf("    note: %s\n", g.note.c_str());
    if (d.kind == DeviceKind::cuda && g.device_bytes != g.bytes)
      std::printf("    on %s: %s in its kernel's layout\n", d.name.c_str(), human_bytes(double(g.device_bytes)).c_str());
  }
  if (d.kind == DeviceKind::cuda)
    std::printf("\nweights on %s: %s in the CUDA kernels' layouts (stored: %s)\n", d.name.c_str(),
                human_bytes(double(plan.device_bytes)).c_str(), human_bytes(double(plan_stored_bytes(plan))).c_str());
  const auto missing = unplanned_groups(plan);
  if (!arch_runs) {
    std::printf("\nNOT RUNNABLE: nibble has no forward for %s yet (its weights would read %s per token)\n",
                plan.architecture.empty() ? "a model without an architecture" : plan.architecture.c_str(),
                human_bytes(double(plan.bytes_per_token)).c_str());
  } else if (missing.empty() && plan.backend.empty()) {
    std::printf("\nNOT RUNNABLE on %s: every op has a kernel, but nibble has no backend for it yet\n", d.name.c_str());
  } else if (missing.empty()) {
    std::printf("\ndecode reads %s of weights per token -> at most %.2f tokens/s at %.1f GB/s\n",
                human_bytes(double(plan.bytes_per_token)).c_str(), plan.bound_tokens_per_s, d.bandwidth_gbps);
  } else {
    // No bound: a model that cannot run has no speed.
    std::printf("\nNOT RUNNABLE on %s: %zu tensor group(s) have no kernel:", d.name.c_str(), missing.size());
    for (size_t i = 0; i < missing.size(); ++i)
      std::printf("%s %s (%s)", i ? "," : "", missing[i]->group.c_str(), op_name(missing[i]->op));
    std::printf("\n");
  }
  std::printf("\nspeculative decoding: off. %s\n", speculation_why(plan).c_str());
  for (const auto& w : plan.warnings) std::printf("warning: %s\n", w.c_str());
}

int run_explain(const std::vector<std::string>& argv) {
  ParsedArgs args = parse_args(argv, kOptions);
  const std::string usage = "nibble explain MODEL_DIR [--device NAME] [--json] [options]";
  if (args.help) {
    std::cout << format_help(usage,
                             "Shows how nibble would run a model: the format of every tensor group and\n"
                             "where that was decided (hf_quant_config.json, config.json, the tensors),\n"
                             "the kernel chosen for each op on the device with every rejected\n"
                             "alternative and its reason, the weight bytes one decoded token reads, and\n"
                             "the tokens/s that memory bandwidth allows. With --device it plans for a\n"
                             "named device instead of this machine.",
                             kOptions);
    return 0;
  }
  if (args.positional.size() != 1) usage_fail("expected one MODEL_DIR (usage: ", usage, ")");
  int threads = threads_arg(args);
  double bandwidth = args.number("--bandwidth", 0, 0.001, 1e6);
  PlanOptions opt;
  opt.moe_backend = args.str("--moe-backend", "auto");
  opt.linear_backend = args.str("--linear-backend", "auto");
  check_backend_name("--moe-backend", opt.moe_backend, true);
  check_backend_name("--linear-backend", opt.linear_backend, false);
  opt.batch = args.integer("--batch", 1, 1, 1 << 20);
  const std::string device_name = args.str("--device", "host");
  const auto devices = named_device_list();
  if (std::find(devices.begin(), devices.end(), device_name) == devices.end() && !is_cuda_device_spec(device_name)) {
    std::string known;
    for (const auto& n : devices) known += (known.empty() ? "" : ", ") + n;
    usage_fail("flag --device: unknown device '", device_name, "' (known: ", known, ", cuda, cuda:N)");
  }

  auto ck = Checkpoint::open(args.positional[0]);
  Detection det = detect_formats(*ck);
  // The tokens/s bound needs this machine's bandwidth: measured here (the
  // only command besides bench that does), and said so.
  const bool measures = device_name == "host" && bandwidth <= 0;
  const auto t0 = std::chrono::steady_clock::now();
  if (measures) std::fprintf(stderr, "[nibble] measuring memory bandwidth (--bandwidth GBPS skips this)...\n");
  Device device = named_device(device_name, threads, bandwidth);
  if (measures)
    std::fprintf(stderr, "[nibble] measured %.1f GB/s in %.2f s\n", device.bandwidth_gbps,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  Plan plan = plan_checkpoint(*ck, det, device, opt);
  // The kernels of any checkpoint can be planned; a forward exists only for
  // the architectures the Engine runs.
  const std::vector<std::string> runs = runnable_architectures();
  const bool arch_runs = std::find(runs.begin(), runs.end(), plan.architecture) != runs.end();
  if (!arch_runs) plan.backend.clear();
  const auto missing = unplanned_groups(plan);
  // Every op may have a kernel on a device nibble has no backend for yet
  // (CUDA: the kernels exist, the forward on them is issue 16).
  const bool has_backend = !plan.backend.empty() || !arch_runs;
  if (args.has("--json")) {
    nlohmann::json j = plan_json(plan);
    j["runnable"] = missing.empty() && arch_runs && has_backend;
    j["profile"] = args.has("--profile");
    if (!missing.empty() || !arch_runs || !has_backend) j["bound_tokens_per_s"] = nullptr;
    std::cout << j.dump(2) << "\n";
  } else {
    print_plan(ck->path(), plan, arch_runs, args.has("--profile"));
  }
  if (!arch_runs) {
    std::fprintf(stderr, "nibble explain: error: architecture \"%s\" is not supported yet: nibble plans its kernels "
                 "but cannot run it\n", plan.architecture.c_str());
    return 1;
  }
  if (!missing.empty()) {
    std::fprintf(stderr, "nibble explain: error: %zu tensor group(s) have no kernel on %s (first: %s); "
                 "nibble cannot run this model there yet\n", missing.size(), device.name.c_str(),
                 missing[0]->group.c_str());
    return 1;
  }
  if (!has_backend) {
    std::fprintf(stderr, "nibble explain: error: every op has a kernel on %s, but nibble has no backend that runs "
                 "the forward there yet\n", device.name.c_str());
    return 1;
  }
  return 0;
}

RegisterCommand reg({"explain", "show formats, chosen kernels (and rejected ones), bytes/token for a model",
                     run_explain});

}  // namespace
}  // namespace nibble::cli
