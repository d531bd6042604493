#include "convert/convert.h"

#include <chrono>
#include <filesystem>
#include <future>
#include <set>
#include <map>
#include <mutex>
#include <thread>

#include "checkpoint/checkpoint.h"
#include "checkpoint/detect.h"
#include "checkpoint/safetensors_writer.h"
#include "convert/quant_metadata.h"
#include "convert/shard_pipeline.h"
#include "convert/staging.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace nibble {

namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Files of SRC that the conversion writes itself.
bool written_by_convert(const std::string& name) {
  return name == "config.json" || name == "hf_quant_config.json" || name == "model.safetensors.index.json" ||
         fs::path(name).extension() == ".safetensors";
}

// Copies every other file of SRC (tokenizer, generation config, licence,
// code folders) into the output, following symlinks (Hugging Face caches
// link into a blob store). Hidden entries (.cache, .git) are not model files.
void copy_other_files(const std::string& src, const std::string& out, const Checkpoint& ck,
                      const std::atomic<int>* cancel, ConvertReport* report) {
  std::set<std::string> shard_names;
  for (const auto& s : ck.shards()) shard_names.insert(fs::path(s->path()).filename().string());
  std::vector<std::pair<fs::path, fs::path>> todo = {{fs::path(src), fs::path(out)}};
  while (!todo.empty()) {
    auto [from_dir, to_dir] = todo.back();
    todo.pop_back();
    std::vector<fs::path> entries;
    for (const auto& e : fs::directory_iterator(from_dir)) entries.push_back(e.path());
    std::sort(entries.begin(), entries.end());
    for (const auto& from : entries) {
      check_cancel(cancel);
      const std::string name = from.filename().string();
      if (name.empty() || name[0] == '.') continue;
      const bool top = from_dir == fs::path(src);
      if (top && written_by_convert(name)) {
        if (fs::path(name).extension() == ".safetensors" && !shard_names.count(name))
          report->warnings.push_back(name + " is not a shard of the checkpoint (not in its index): not copied");
        continue;
      }
      std::error_code ec;
      const fs::file_status st = fs::status(from, ec);  // follows symlinks
      const fs::path to = to_dir / name;
      if (fs::is_directory(st)) {
        if (!fs::create_directory(to, ec) || ec) fail(to.string(), ": cannot create: ", ec.message());
        todo.push_back({from, to});
      } else if (fs::is_regular_file(st)) {
        report->other_bytes += copy_file_synced(from.string(), to.string());
        ++report->other_files;
      } else {
        report->warnings.push_back(from.string() + " is not a regular file or folder: not copied");
      }
    }
  }
}

// The finished folder, opened as any reader would: every shard header, the
// index against the shards, and the experts' formats as planned.
void verify_output(const std::string& dir, const ConvertPlan& plan) {
  auto ck = Checkpoint::open(dir);
  Detection det = detect_formats(*ck);
  std::map<std::string, Format> formats;
  for (const auto& t : det.tensors) formats[t.name] = t.format;
  for (const auto& e : plan.experts) {
    const std::string& name = e.stacked.empty() ? e.base : e.stacked;  // gpt-oss: one stacked tensor holds E experts
    auto it = formats.find(name);
    if (it == formats.end()) fail(dir, ": converted expert ", name, " is missing from the output");
    if (it->second != plan.target)
      fail(dir, ": converted expert ", name, " reads back as ", format_name(it->second), ", not ",
           format_name(plan.target));
  }
  // The metadata convert wrote for gpt-oss must describe its tensors exactly.
  if (plan.layout == ExpertLayout::gpt_oss && !det.warnings.empty())
    fail(dir, ": the converted checkpoint's metadata contradicts its tensors: ", det.warnings.front());
}

}  // namespace

ConvertReport convert_checkpoint(const ConvertOptions& opt) {
  const auto t0 = Clock::now();
  ConvertReport report;
  report.src = opt.src;
  report.dst = opt.dst;
  report.target = opt.target;
  if (opt.target != Format::nvfp4 && opt.target != Format::mxfp4)
    fail("--to must be nvfp4 or mxfp4, not ", format_name(opt.target));

  std::error_code ec;
  if (!fs::is_directory(opt.src, ec)) fail("SRC ", opt.src, " is not a model folder");
  auto ck = Checkpoint::open(opt.src);
  // A checkpoint whose quantization nibble cannot read is refused before
  // anything is created: copying it with a rewritten config would only
  // produce a broken model that claims to be converted.
  Detection det = detect_formats(*ck);
  if (!det.unsupported.empty()) {
    const Unsupported& u = det.unsupported.front();
    fail("SRC ", opt.src, ": ", u.method, " (", u.source, u.tensor.empty() ? "" : ", tensor " + u.tensor,
         ") is not a format convert reads; it converts DeepSeek-V4-style checkpoints with MXFP4, NVFP4 or BF16 "
         "routed experts and gpt-oss's MXFP4 / per-expert NVFP4 experts");
  }
  OutputStaging staging(opt.src, opt.dst, opt.force);
  report.replaced_existing = staging.replaces_existing();

  PlanProgress pp;
  pp.cancel = opt.cancel;
  if (opt.on_progress) pp.on_scan = [&](uint64_t done, uint64_t total) { opt.on_progress({"scan", done, total}); };
  ConvertPlan plan = make_convert_plan(*ck, det, opt.target, opt.mtp, pp);
  report.scan_seconds = seconds_since(t0);
  report.warnings = plan.warnings;
  report.tensors_in = int64_t(ck->tensors().size());
  report.bytes_in = ck->total_bytes();
  report.experts_converted = int64_t(plan.experts.size());
  report.experts_kept = plan.experts_kept;
  report.mtp_experts_kept = plan.mtp_experts_kept;
  if (plan.experts.empty() && plan.experts_kept == 0 && plan.layout == ExpertLayout::dsv4)
    fail("SRC ", opt.src, ": no routed experts in DeepSeek-V4 naming (layers.N.ffn.experts.M.w1/w2/w3.weight) "
         "were found (metadata: ", det.metadata_schema, "); convert rewrites only those");

  // ---- Shards -----------------------------------------------------------------
  // `jobs` lanes write shards at once, each with its own producer, writer
  // and read-back threads (shard_pipeline.h): one lane keeps one core busy
  // writing (the kernel's copy into the page cache is most of it) and reads
  // its previous shard back on another thread; a second lane uses the second
  // core. Buffered writes to one file are serialized by the kernel (inode
  // lock), so lanes take whole shards. A failure in any lane stops the
  // others between chunks, and the first error is the one reported.
  uint64_t total = 0, done = 0;
  for (const auto& s : plan.shards) total += s.data_bytes;
  std::vector<ExpertStats> stats(plan.experts.size());  // each expert is in one shard: lanes write disjoint entries
  std::vector<ShardResult> results(plan.shards.size());
  std::mutex progress_mu, error_mu;
  std::atomic<size_t> next_shard{0};
  std::atomic<bool> stop{false};
  std::exception_ptr first_error;
  auto lane = [&] {
    std::future<void> verifying;  // this lane's previous shard, read back while the next one is written
    try {
      ThreadPool pool(std::max(1, opt.threads));
      for (size_t i; (i = next_shard.fetch_add(1)) < plan.shards.size();) {
        if (stop.load()) throw ShardStopped();
        const ShardPlan& shard = plan.shards[i];
        ShardPipelineOptions so;
        so.max_in_flight = opt.max_in_flight;
        so.cancel = opt.cancel;
        so.stop = &stop;
        so.on_written = [&](uint64_t n) {
          std::lock_guard<std::mutex> lock(progress_mu);
          done += n;
          if (opt.on_progress) opt.on_progress({"write", done, total});
        };
        const std::string path = (fs::path(staging.dir()) / shard.file).string();
        results[i] = write_shard(plan, shard, path, pool, so, &stats);
        if (opt.after_shard_written) opt.after_shard_written(path);
        if (verifying.valid()) verifying.get();
        verifying = std::async(std::launch::async, [&r = results[i], path, &shard] {
          verify_shard(path, r.tensors, r.offsets, shard.metadata, r.file_bytes, r.digest);
        });
      }
      if (verifying.valid()) verifying.get();
    } catch (...) {
      if (verifying.valid()) verifying.wait();  // its error, if any, comes second
      std::lock_guard<std::mutex> lock(error_mu);
      if (!first_error) first_error = std::current_exception();
      stop = true;
    }
  };
  {
    const size_t jobs = std::max<size_t>(1, std::min<size_t>(size_t(std::max(1, opt.jobs)), plan.shards.size()));
    std::vector<std::thread> others;
    for (size_t j = 1; j < jobs; ++j) others.emplace_back(lane);
    lane();  // the first lane on this thread
    for (auto& t : others) t.join();
  }
  if (first_error) std::rethrow_exception(first_error);
  std::map<std::string, std::string> weight_map;
  uint64_t index_total = 0;
  for (size_t i = 0; i < plan.shards.size(); ++i) {
    const ShardPlan& shard = plan.shards[i];
    report.bytes_out += results[i].file_bytes;
    index_total += shard.data_bytes;
    for (const auto& t : shard.tensors) {
      weight_map[t.spec.name] = shard.file;
      if (t.kind == OutputTensor::Kind::copy) ++report.tensors_copied;
    }
    report.tensors_out += int64_t(shard.tensors.size());
    ++report.shards;
  }
  // An index whenever the source had one or there is more than one shard.
  if (fs::exists(ck->file_path("model.safetensors.index.json")) || plan.shards.size() > 1)
    write_safetensors_index((fs::path(staging.dir()) / "model.safetensors.index.json").string(), index_total,
                            weight_map);

  // ---- Metadata and the other files -------------------------------------------
  ConvertedMetadata meta = convert_metadata(ck->file_path("config.json"), plan);
  write_file_atomic((fs::path(staging.dir()) / "config.json").string(), meta.config_json);
  report.written_metadata.push_back("config.json");
  if (meta.hf_quant_config) {
    write_file_atomic((fs::path(staging.dir()) / "hf_quant_config.json").string(), *meta.hf_quant_config);
    report.written_metadata.push_back("hf_quant_config.json");
  }
  report.quantized_layers = meta.quantized_layers;
  report.exclude_modules = meta.exclude_modules;
  copy_other_files(opt.src, staging.dir(), *ck, opt.cancel, &report);

  check_cancel(opt.cancel);
  verify_output(staging.dir(), plan);
  check_cancel(opt.cancel);
  staging.commit();

  // ---- Report -----------------------------------------------------------------
  std::map<ExpertOp, size_t> op_index;
  for (size_t i = 0; i < plan.experts.size(); ++i) {
    const ExpertItem& e = plan.experts[i];
    auto [it, fresh] = op_index.emplace(e.op, report.ops.size());
    if (fresh) report.ops.push_back({e.op, 0, {}, ""});
    ConvertOpSummary& s = report.ops[it->second];
    ++s.tensors;
    if (stats[i].max_abs_error > s.stats.max_abs_error) s.max_error_tensor = e.base;
    s.stats.merge(stats[i]);
    if (stats[i].max_abs_error > report.total.max_abs_error) report.max_error_tensor = e.base;
    report.total.merge(stats[i]);
  }
  report.seconds = seconds_since(t0);
  return report;
}

}  // namespace nibble
