#include <algorithm>
#include <cstdio>

#include "kernels/registry.h"
#include "util/error.h"

namespace nibble {

const char* op_name(Op op) { return op == Op::linear ? "linear" : "moe"; }

double kernel_cost_s(const KernelDesc& k, const OpShape& shape, const Device& device) {
  double mem = shape.bytes / (device.bandwidth_gbps * 1e9 * k.bandwidth_efficiency);
  double compute = shape.flops / (device.peak_gflops * 1e9 * k.compute_efficiency);
  return std::max(mem, compute);
}

namespace {

std::string ms(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g ms", s * 1e3);
  return buf;
}

// "" when k can run `shape` on `device`, else the reason.
std::string why_not(const KernelDesc& k, const OpShape& shape, const Device& device) {
  if (std::find(k.formats.begin(), k.formats.end(), shape.format) == k.formats.end())
    return std::string("does not handle ") + format_name(shape.format);
  if (std::string r = k.unsupported(device); !r.empty()) return r;
  if (k.max_batch > 0 && shape.batch > k.max_batch)
    return "batch " + std::to_string(shape.batch) + " is above its limit of " +
           std::to_string(k.max_batch);
  return "";
}

}  // namespace

bool kernel_is_lossy(const KernelDesc& k, Format f) {
  return k.lossy && std::find(k.lossy_formats.begin(), k.lossy_formats.end(), f) != k.lossy_formats.end();
}

Selection select_kernel(const std::vector<KernelDesc>& registry, const OpShape& shape,
                        const Device& device, const std::string& override_name,
                        const std::string& flag) {
  const bool forced = !override_name.empty() && override_name != "auto";
  struct Candidate {
    const KernelDesc* k;
    std::string reason;  // "" if runnable
    double cost;
  };
  std::vector<Candidate> cands;
  const KernelDesc* forced_k = nullptr;
  std::string known;
  for (const auto& k : registry) {
    if (k.op != shape.op) continue;
    known += (known.empty() ? "" : ", ") + std::string(k.name);
    std::string r = why_not(k, shape, device);
    cands.push_back({&k, r, r.empty() ? kernel_cost_s(k, shape, device) : 0});
    if (forced && override_name == k.name) forced_k = &k;
  }

  Selection sel;
  if (forced) {
    if (!forced_k)
      fail(flag, " ", override_name, ": no such ", op_name(shape.op), " kernel (known: ", known, ")");
    for (const auto& c : cands)
      if (c.k == forced_k && !c.reason.empty())
        fail(flag, " ", override_name, " cannot run ", format_name(shape.format), " ",
             op_name(shape.op), " on ", device.name, ": ", c.reason);
    sel.chosen = forced_k;
    sel.why = "chosen by " + flag + " " + override_name;
    if (kernel_is_lossy(*forced_k, shape.format)) sel.why += std::string(" (lossy: ") + forced_k->lossy + ")";
    if (forced_k->batch_variant) sel.why += std::string(" (not batch invariant: ") + forced_k->batch_variant + ")";
  } else {
    // Opt-in kernels are never the automatic choice: their rejection says
    // what they round and how to ask for them.
    for (auto& c : cands) {
      if (!c.reason.empty() || (!c.k->lossy && !c.k->batch_variant)) continue;
      const std::string opt_in = "; opt in with " + flag + " " + c.k->name;
      if (!c.k->lossy) {
        c.reason = std::string("opt-in only (not batch invariant: ") + c.k->batch_variant + ")" + opt_in;
      } else if (kernel_is_lossy(*c.k, shape.format)) {
        c.reason = std::string(c.k->lossy) + " (lossy)" + opt_in;
      } else {
        std::string fmts;
        for (Format f : c.k->lossy_formats) fmts += (fmts.empty() ? "" : "/") + std::string(format_name(f));
        c.reason = std::string("opt-in only (") + c.k->lossy + " for " + fmts + "; exact for " +
                   format_name(shape.format) + ")" + opt_in;
      }
    }
    for (const auto& c : cands)
      if (c.reason.empty() && (!sel.chosen || c.cost < sel.cost_s)) {
        sel.chosen = c.k;
        sel.cost_s = c.cost;
      }
    if (sel.chosen) sel.why = "fastest runnable candidate (est " + ms(sel.cost_s) + ")";
  }
  for (const auto& c : cands) {
    if (c.k == sel.chosen) {
      sel.cost_s = c.cost;
      continue;
    }
    std::string reason = c.reason;
    if (reason.empty())
      reason = forced ? "not chosen: " + flag + " " + override_name + " was given"
                      : "slower: est " + ms(c.cost) + " vs " + ms(sel.cost_s);
    sel.rejected.push_back({c.k->name, reason});
  }
  return sel;
}

}  // namespace nibble
