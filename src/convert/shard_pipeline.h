// Writes one output shard of a conversion plan: a producer thread turns the
// plan's tensors into byte chunks (pointers into the source map for copies
// and for the FP4 bytes of lossless casts, freshly converted rows otherwise,
// computed on a small thread pool); the calling thread checksums them and
// streams them through SafetensorsWriter, a cache-sized piece at a time.
// verify_shard() then reads the finished file back and checks it against
// the plan and the checksum (the converter runs it on another thread while
// the next shard is written).
//
// Memory stays bounded whatever the model size: at most `max_in_flight`
// bytes of converted chunks are queued (in recycled buffers of at most
// 4 MB) and `max_borrowed` bytes of mapped source, plus one expert's block
// scales, which must follow its complete weight in the file (for gpt-oss's
// stacked MXFP4 output, the E experts' scales of one stacked tensor: 1/16
// of its bytes).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "convert/convert_plan.h"
#include "convert/expert_convert.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace nibble {

struct ShardPipelineOptions {
  size_t max_in_flight = size_t(16) << 20;  // bytes of buffers queued between producer and writer
  size_t max_borrowed = size_t(64) << 20;   // bytes of the (mapped, populated) source queued
  const std::atomic<int>* cancel = nullptr;  // polled between chunks
  const std::atomic<bool>* stop = nullptr;   // also polled: set when another shard failed
  std::function<void(uint64_t bytes)> on_written;  // called after each chunk reaches the file
};

// What write_shard throws when ShardPipelineOptions::stop was set: the
// shard gave up because another one failed first (whose error is the one
// to report).
class ShardStopped : public Error {
 public:
  ShardStopped() : Error("stopped: another shard failed") {}
};

struct ShardResult {
  uint64_t file_bytes = 0;         // the shard's size on disk, header included
  uint64_t digest = 0;             // StreamHash of the data section as written
  std::vector<TensorSpec> tensors; // in file order
  std::vector<uint64_t> offsets;   // of each tensor, from the start of the file
};

// Writes `shard` to `path` (which must not exist), flushed to disk, not yet
// verified. Statistics of the converted experts go to
// (*expert_stats)[ExpertItem index]. Throws nibble::Error (or Interrupted);
// nothing is left at `path` or beside it then.
ShardResult write_shard(const ConvertPlan& plan, const ShardPlan& shard, const std::string& path, ThreadPool& pool,
                        const ShardPipelineOptions& options, std::vector<ExpertStats>* expert_stats);

// Re-reads a finished shard: its header must list exactly `tensors` at
// `offsets` with `metadata`, and its data section must hash to `digest`.
void verify_shard(const std::string& path, const std::vector<TensorSpec>& tensors,
                  const std::vector<uint64_t>& offsets, const std::map<std::string, std::string>& metadata,
                  uint64_t file_size, uint64_t digest);

}  // namespace nibble
