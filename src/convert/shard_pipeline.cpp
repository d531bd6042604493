#include "convert/shard_pipeline.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

#include "checkpoint/safetensors.h"
#include "checkpoint/safetensors_writer.h"
#include "convert/checksum.h"
#include "util/error.h"

namespace nibble {

namespace {

constexpr size_t kCopyChunk = size_t(32) << 20;     // bytes per chunk of a copied tensor
constexpr size_t kConvertChunk = size_t(16) << 20;  // output bytes per chunk of a converted weight
constexpr size_t kVerifyBuffer = size_t(8) << 20;   // read-back buffer

// One piece of one output tensor, in file order.
struct Chunk {
  size_t tensor = 0;               // index into ShardPlan::tensors
  const uint8_t* data = nullptr;   // into `owned`, or into the source map (copies)
  size_t n = 0;
  std::vector<uint8_t> owned;
  bool end = false;                // the producer is done
  std::exception_ptr error;        // the producer failed
};

// A bounded FIFO between the producer thread and the writing thread. push()
// waits while the queued bytes would exceed the limit (a chunk larger than
// the limit still goes through alone); stop() makes both sides give up.
class ChunkQueue {
 public:
  explicit ChunkQueue(size_t max_bytes) : max_bytes_(max_bytes) {}

  bool push(Chunk&& c, bool force = false) {
    std::unique_lock<std::mutex> lock(mu_);
    room_.wait(lock, [&] { return stopped_ || force || q_.empty() || bytes_ + c.n <= max_bytes_; });
    if (stopped_ && !force) return false;
    bytes_ += c.n;
    q_.push_back(std::move(c));
    ready_.notify_one();
    return true;
  }

  Chunk pop() {
    std::unique_lock<std::mutex> lock(mu_);
    ready_.wait(lock, [&] { return !q_.empty(); });
    Chunk c = std::move(q_.front());
    q_.pop_front();
    bytes_ -= c.n;
    room_.notify_one();
    return c;
  }

  void stop() {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
    room_.notify_all();
  }
  bool stopped() {
    std::lock_guard<std::mutex> lock(mu_);
    return stopped_;
  }

 private:
  std::mutex mu_;
  std::condition_variable room_, ready_;
  std::deque<Chunk> q_;
  size_t bytes_ = 0;
  size_t max_bytes_;
  bool stopped_ = false;
};

// Asks the kernel to start reading a range of a mapped source file.
void prefetch(const uint8_t* p, size_t n) {
  const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  uintptr_t begin = uintptr_t(p) & ~(page - 1);
  uintptr_t end = uintptr_t(p) + n;
  posix_madvise(reinterpret_cast<void*>(begin), end - begin, POSIX_MADV_WILLNEED);
}

// Drops the page mappings of a consumed range of the read-only source map:
// without this the resident size would grow to the whole model over a
// conversion. The data stays in the page cache and would simply fault in
// again. Only pages entirely inside the range are dropped.
void release(const uint8_t* p, size_t n) {
  const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (uintptr_t(p) + page - 1) & ~(page - 1);
  const uintptr_t end = (uintptr_t(p) + n) & ~(page - 1);
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

class Producer {
 public:
  Producer(const ConvertPlan& plan, const ShardPlan& shard, ThreadPool& pool, ChunkQueue& queue,
           const std::atomic<int>* cancel, std::vector<ExpertStats>* stats)
      : plan_(plan), shard_(shard), pool_(pool), queue_(queue), cancel_(cancel), stats_(stats) {}

  void run() {
    try {
      for (size_t i = 0; i < shard_.tensors.size() && !queue_.stopped(); ++i) produce(i);
      Chunk end;
      end.end = true;
      queue_.push(std::move(end), /*force=*/true);
    } catch (...) {
      Chunk err;
      err.error = std::current_exception();
      queue_.push(std::move(err), /*force=*/true);
    }
  }

 private:
  // A chunk pointing into memory that outlives the shard (the source map).
  bool emit_borrowed(size_t tensor, const uint8_t* data, size_t n) {
    check_cancel(cancel_);
    Chunk c;
    c.tensor = tensor;
    c.n = n;
    c.data = data;
    return queue_.push(std::move(c));
  }
  // A chunk that owns its bytes.
  bool emit_owned(size_t tensor, std::vector<uint8_t>&& bytes) {
    check_cancel(cancel_);
    Chunk c;
    c.tensor = tensor;
    c.n = bytes.size();
    c.owned = std::move(bytes);
    c.data = c.owned.data();
    return queue_.push(std::move(c));
  }

  void produce(size_t i) {
    const OutputTensor& t = shard_.tensors[i];
    switch (t.kind) {
      case OutputTensor::Kind::copy: {
        const TensorInfo& src = *t.src;
        for (uint64_t off = 0; off < src.nbytes; off += kCopyChunk) {
          const size_t n = size_t(std::min<uint64_t>(kCopyChunk, src.nbytes - off));
          prefetch(src.data + off, n);
          if (!emit_borrowed(i, src.data + off, n)) return;
        }
        return;
      }
      case OutputTensor::Kind::scalar: {
        std::vector<uint8_t> bytes(4);
        std::memcpy(bytes.data(), &t.value, 4);
        emit_owned(i, std::move(bytes));
        return;
      }
      case OutputTensor::Kind::expert_weight:
        convert_weight(i, plan_.experts[size_t(t.expert)], &(*stats_)[size_t(t.expert)]);
        return;
      case OutputTensor::Kind::expert_scale:
        if (pending_scales_expert_ != t.expert)
          fail(shard_.file, ": tensor ", t.spec.name, " is planned before its weight");  // a plan bug
        emit_owned(i, std::move(pending_scales_));
        pending_scales_ = {};
        pending_scales_expert_ = -1;
        return;
    }
  }

  // Rows go out in chunks as they are converted; the block scales of the
  // whole matrix are kept for the tensor that follows.
  void convert_weight(size_t i, const ExpertItem& e, ExpertStats* stats) {
    const int64_t rows = e.source.rows, cols = e.source.cols;
    const int64_t packed_row = target_packed_row_bytes(e.op, cols);
    const int64_t scale_row = target_scale_row_bytes(e.op, cols);
    pending_scales_.assign(size_t(rows * scale_row), 0);
    pending_scales_expert_ = int(&e - plan_.experts.data());
    const int64_t rows_per_chunk = std::max<int64_t>(1, int64_t(kConvertChunk) / std::max<int64_t>(1, packed_row));
    std::vector<ExpertStats> part(size_t(pool_.size()));
    for (int64_t r0 = 0; r0 < rows; r0 += rows_per_chunk) {
      const int64_t r1 = std::min(rows, r0 + rows_per_chunk);
      std::vector<uint8_t> out(size_t((r1 - r0) * packed_row));
      std::vector<std::exception_ptr> errors(size_t(pool_.size()));
      pool_.parallel_for(
          r1 - r0,
          [&](int64_t a, int64_t b, int thread) {
            try {
              part[size_t(thread)].merge(convert_expert_rows(e.source, e.op, e.params, r0 + a, r0 + b,
                                                             out.data() + a * packed_row,
                                                             pending_scales_.data() + (r0 + a) * scale_row, e.base));
            } catch (...) {
              errors[size_t(thread)] = std::current_exception();
            }
          },
          /*grain=*/8);
      for (auto& err : errors)
        if (err) std::rethrow_exception(err);
      if (!emit_owned(i, std::move(out))) return;
    }
    for (const auto& p : part) stats->merge(p);
    const ExpertSource& src = e.source;
    const int64_t elem = src.format == Format::bf16 ? 2 : src.format == Format::f32 ? 4 : 0;
    release(src.data, size_t(elem ? rows * cols * elem : rows * cols / 2));
    if (src.scales) release(src.scales, size_t(rows * cols / (src.format == Format::nvfp4 ? 16 : 32)));
  }

  const ConvertPlan& plan_;
  const ShardPlan& shard_;
  ThreadPool& pool_;
  ChunkQueue& queue_;
  const std::atomic<int>* cancel_;
  std::vector<ExpertStats>* stats_;
  std::vector<uint8_t> pending_scales_;
  int pending_scales_expert_ = -1;
};

}  // namespace

ShardResult write_shard(const ConvertPlan& plan, const ShardPlan& shard, const std::string& path, ThreadPool& pool,
                        const ShardPipelineOptions& options, std::vector<ExpertStats>* expert_stats) {
  std::vector<TensorSpec> specs;
  specs.reserve(shard.tensors.size());
  for (const auto& t : shard.tensors) specs.push_back(t.spec);

  StreamHash hash;
  ShardResult result;
  std::vector<uint64_t> offsets;
  {
    SafetensorsWriter writer(path, specs, shard.metadata);
    ChunkQueue queue(options.max_in_flight);
    Producer producer(plan, shard, pool, queue, options.cancel, expert_stats);
    std::thread thread([&] { producer.run(); });
    try {
      for (;;) {
        Chunk c = queue.pop();
        if (c.error) std::rethrow_exception(c.error);
        if (c.end) break;
        check_cancel(options.cancel);
        hash.update(c.data, c.n);
        writer.write(specs[c.tensor].name, c.data, c.n);
        if (c.owned.empty()) release(c.data, c.n);  // a copy, straight from the source map
        if (options.on_written) options.on_written(c.n);
      }
    } catch (...) {
      queue.stop();
      // Drain so that a producer blocked on a full queue sees the stop.
      thread.join();
      throw;
    }
    thread.join();
    check_cancel(options.cancel);
    writer.finish();
    result.file_bytes = writer.layout().file_size;
    offsets = writer.layout().offsets;
  }
  result.digest = hash.digest();
  try {
    verify_shard(path, specs, offsets, shard.metadata, result.file_bytes, result.digest);
  } catch (...) {
    ::unlink(path.c_str());
    throw;
  }
  return result;
}

void verify_shard(const std::string& path, const std::vector<TensorSpec>& tensors,
                  const std::vector<uint64_t>& offsets, const std::map<std::string, std::string>& metadata,
                  uint64_t file_size, uint64_t digest) {
  uint64_t data_start = 0;
  {
    SafetensorsFile file(path);  // parses and validates the header again
    if (file.file_size() != file_size)
      fail(path, ": read back ", file.file_size(), " bytes, but ", file_size, " were written");
    if (file.metadata() != metadata) fail(path, ": read back a different __metadata__ than was written");
    // The reader lists tensors by offset; the writer's order is file order.
    const auto& got = file.tensors();
    if (got.size() != tensors.size())
      fail(path, ": read back ", got.size(), " tensors, but ", tensors.size(), " were written");
    for (size_t i = 0; i < got.size(); ++i) {
      const TensorInfo& g = got[i];
      if (g.name != tensors[i].name || g.dtype != tensors[i].dtype || g.shape != tensors[i].shape ||
          g.offset != offsets[i])
        fail(path, ": tensor ", tensors[i].name, " read back as ", g.name, " ", dtype_name(g.dtype), " ",
             g.shape_str(), " at offset ", g.offset, " (written at ", offsets[i], ")");
    }
    data_start = tensors.empty() ? file_size : offsets[0];
    if (!tensors.empty() && offsets[0] < 8) fail(path, ": bad first offset");
  }
  // Hash the data section with plain reads: the data was just written, so it
  // is normally still in the page cache.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, ": cannot reopen for verification: ", std::strerror(errno));
  posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  StreamHash hash;
  std::vector<uint8_t> buf(kVerifyBuffer);
  uint64_t off = data_start;
  while (off < file_size) {
    const size_t want = size_t(std::min<uint64_t>(buf.size(), file_size - off));
    ssize_t got = ::pread(fd, buf.data(), want, off_t(off));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      int err = got < 0 ? errno : 0;
      ::close(fd);
      fail(path, ": reading back at offset ", off, ": ", err ? std::strerror(err) : "unexpected end of file");
    }
    hash.update(buf.data(), size_t(got));
    off += uint64_t(got);
  }
  ::close(fd);
  if (hash.digest() != digest)
    fail(path, ": the data read back differs from the data written (checksum ", std::hex, hash.digest(), " != ",
         digest, "): the disk or file system corrupted it");
}

}  // namespace nibble
