// `nibble convert`: rewrites a DeepSeek-V4 style checkpoint with its routed
// experts in another FP4 format, leaving every other tensor byte for byte as
// it was.
//   MXFP4 -> NVFP4  the lossless cast of formats.md (w1/w3 share
//                   weight_scale_2); blocks outside E4M3's window are
//                   re-quantized and counted
//   NVFP4 -> MXFP4  re-quantization, lossy in general (the error is reported)
//   BF16  -> either round-to-nearest quantization
// The output is a complete model folder (shards as the source's, index,
// config.json, hf_quant_config.json, tokenizer and every other file) that
// appears at DST only once all of it was written and verified (staging.h).
// docs/convert.md is the user-facing description.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "convert/convert_plan.h"
#include "convert/expert_convert.h"
#include "format/format.h"

namespace nibble {

struct ConvertProgress {
  const char* phase;   // "scan" (reading scales or amax), "write" (shards)
  uint64_t done = 0;   // bytes
  uint64_t total = 0;
};

struct ConvertOptions {
  std::string src, dst;
  Format target = Format::nvfp4;        // nvfp4 or mxfp4
  MtpExperts mtp = MtpExperts::auto_;
  bool force = false;                   // replace a non-empty DST (at the end)
  int threads = 2;                      // threads converting rows, per shard being written
  int jobs = 2;                         // shards written at once
  size_t max_in_flight = size_t(16) << 20;  // bytes queued between converting and writing
  const std::atomic<int>* cancel = nullptr;  // a signal number here stops the conversion
  std::function<void(const ConvertProgress&)> on_progress;  // called from the writing threads, one at a time
  // Called on the writing thread with each shard's path once it is written
  // and flushed, before it is read back; an exception it throws fails the
  // conversion like any other. For tests (corrupting a shard on disk,
  // failing one lane while another writes).
  std::function<void(const std::string& path)> after_shard_written;
};

// Totals of one kind of conversion.
struct ConvertOpSummary {
  ExpertOp op = ExpertOp::mxfp4_to_nvfp4;
  int64_t tensors = 0;           // expert matrices
  ExpertStats stats;
  std::string max_error_tensor;  // where max_abs_error occurred ("" when it is 0)
};

struct ConvertReport {
  std::string src, dst;
  Format target = Format::nvfp4;
  int64_t tensors_in = 0, tensors_out = 0;  // stored tensors
  int64_t experts_converted = 0;            // expert matrices that changed format
  int64_t experts_kept = 0;                 // expert matrices copied unchanged
  int64_t mtp_experts_kept = 0;             // of which in the MTP block
  int64_t tensors_copied = 0;               // stored tensors copied byte for byte
  std::vector<ConvertOpSummary> ops;
  ExpertStats total;                        // over all ops
  std::string max_error_tensor;
  int shards = 0;
  uint64_t bytes_in = 0;                    // tensor bytes of SRC
  uint64_t bytes_out = 0;                   // shard bytes written (headers included)
  int64_t other_files = 0;                  // tokenizer, configs, ... copied
  uint64_t other_bytes = 0;
  std::vector<std::string> written_metadata;  // "config.json", "hf_quant_config.json"
  std::vector<std::string> quantized_layers;  // as listed in hf_quant_config.json
  std::vector<std::string> exclude_modules;
  bool replaced_existing = false;           // --force replaced a non-empty DST
  double scan_seconds = 0, seconds = 0;
  std::vector<std::string> warnings;
};

// Runs the whole conversion. Throws nibble::Error (Interrupted on a signal)
// and then leaves neither DST (an old DST stays untouched) nor any
// temporary file behind.
ConvertReport convert_checkpoint(const ConvertOptions& options);

}  // namespace nibble
