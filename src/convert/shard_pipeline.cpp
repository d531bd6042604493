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
#include "convert/source_pages.h"
#include "format/block.h"
#include "util/error.h"

namespace nibble {

namespace {

// Chunks of 4 MB between producer and writer: few queue operations, and a
// bounded amount of work between two checks for an interruption.
constexpr size_t kCopyChunk = size_t(4) << 20;     // bytes per chunk of a copied tensor
constexpr size_t kConvertChunk = size_t(4) << 20;  // output bytes per chunk of a converted weight
// The writer checksums and writes a chunk in pieces of 256 KB: the checksum
// pulls a piece into this core's L2 cache (from the source map: its first
// and only read from memory) and write(2) copies it into the page cache
// from there. Checksumming a whole 4 MB chunk first would evict it from L2
// before write(2) reads it, one more pass over memory (measured: hash +
// write of 1 GB 0.41 s in 256 KB pieces, 0.48 s in 4 MB ones, 0.31 s for
// the write alone). 256 KB is also the writer's largest write(2) call.
constexpr size_t kWritePiece = size_t(256) << 10;
constexpr uint64_t kVerifyWindow = uint64_t(32) << 20;  // read-back mapping window

// Heap bytes left uninitialized: the producer writes every byte it hands on.
struct Buffer {
  std::unique_ptr<uint8_t[]> bytes;
  size_t capacity = 0;
};

// Buffers travel from the producer to the writer and back instead of being
// allocated per chunk: a fresh 4 MB allocation is a fresh mapping whose
// pages the kernel faults in and zeroes every time, a cost comparable to
// writing them.
class BufferPool {
 public:
  Buffer take(size_t n) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      size_t best = free_.size();  // the smallest free buffer that fits
      for (size_t i = 0; i < free_.size(); ++i)
        if (free_[i].capacity >= n && (best == free_.size() || free_[i].capacity < free_[best].capacity)) best = i;
      if (best < free_.size()) {
        Buffer b = std::move(free_[best]);
        free_.erase(free_.begin() + long(best));
        return b;
      }
    }
    Buffer b;
    b.bytes.reset(new uint8_t[std::max<size_t>(n, 1)]);  // default-initialized: not zeroed
    b.capacity = std::max<size_t>(n, 1);
    return b;
  }
  void give(Buffer&& b) {
    std::lock_guard<std::mutex> lock(mu_);
    if (b.bytes && free_.size() < kMaxFree) free_.push_back(std::move(b));
  }

 private:
  static constexpr size_t kMaxFree = 24;  // more than the queue can hold at once
  std::mutex mu_;
  std::vector<Buffer> free_;
};

// One piece of one output tensor, in file order.
struct Chunk {
  size_t tensor = 0;               // index into ShardPlan::tensors
  const uint8_t* data = nullptr;   // into `owned`, or into the source map (copies)
  size_t n = 0;
  Buffer owned;                    // empty for copies
  bool end = false;                // the producer is done
  std::exception_ptr error;        // the producer failed
};

// A bounded FIFO between the producer thread and the writing thread. push()
// waits while the queued bytes of the chunk's kind would exceed that kind's
// limit (a chunk larger than the limit still goes through alone); stop()
// makes both sides give up. Owned chunks (buffers) and borrowed ones (mapped
// source pages) have separate limits: borrowed chunks cost no memory of
// their own, so the producer may run further ahead with them, which keeps
// the writer from ever waiting for a producer that the scheduler has not run
// yet (on a loaded machine, several milliseconds).
class ChunkQueue {
 public:
  ChunkQueue(size_t max_owned, size_t max_borrowed) : max_{max_owned, max_borrowed} {}

  bool push(Chunk&& c, bool force = false) {
    std::unique_lock<std::mutex> lock(mu_);
    const int kind = c.owned.bytes ? 0 : 1;
    room_.wait(lock, [&] { return stopped_ || force || q_.empty() || bytes_[kind] + c.n <= max_[kind]; });
    if (stopped_ && !force) return false;
    bytes_[kind] += c.n;
    q_.push_back(std::move(c));
    ready_.notify_one();
    return true;
  }

  Chunk pop() {
    std::unique_lock<std::mutex> lock(mu_);
    ready_.wait(lock, [&] { return !q_.empty(); });
    Chunk c = std::move(q_.front());
    q_.pop_front();
    bytes_[c.owned.bytes ? 0 : 1] -= c.n;
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
  size_t bytes_[2] = {0, 0};  // queued: owned, borrowed
  size_t max_[2];
  bool stopped_ = false;
};

// Starts writing a growing file to disk every 64 MB, so that the fsync at
// the end of the shard (SafetensorsWriter::finish) waits only for the tail
// instead of the whole shard: the kernel would otherwise keep up to 10% of
// memory dirty before writing anything back. Best effort: a failure to open
// the file only loses the overlap.
class EarlyWriteback {
 public:
  explicit EarlyWriteback(const std::string& path) : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {}
  ~EarlyWriteback() {
    if (fd_ >= 0) ::close(fd_);
  }
  EarlyWriteback(const EarlyWriteback&) = delete;
  EarlyWriteback& operator=(const EarlyWriteback&) = delete;

  void wrote(size_t n) {
    pending_ += n;
    if (fd_ < 0 || pending_ < kStep) return;
    pending_ = 0;
    ::sync_file_range(fd_, 0, 0, SYNC_FILE_RANGE_WRITE);  // asynchronous: starts writeback, waits for nothing
  }

 private:
  static constexpr size_t kStep = size_t(64) << 20;
  int fd_;
  size_t pending_ = 0;
};

class Producer {
 public:
  Producer(const ConvertPlan& plan, const ShardPlan& shard, ThreadPool& pool, ChunkQueue& queue, BufferPool& buffers,
           const std::atomic<int>* cancel, std::vector<ExpertStats>* stats)
      : plan_(plan), shard_(shard), pool_(pool), queue_(queue), buffers_(buffers), cancel_(cancel), stats_(stats) {}

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
  // Before chunk [off, off + n) of a source range of `total` bytes goes out
  // (and is mapped, synchronously): asks for the next chunk to be read
  // from disk meanwhile, and for this one too when it is the first.
  static void read_ahead(const uint8_t* base, uint64_t total, uint64_t off, size_t n) {
    if (off == 0) prefetch_pages(base, n);
    if (off + n < total) prefetch_pages(base + off + n, size_t(std::min<uint64_t>(n, total - off - n)));
  }

  // A chunk pointing into memory that outlives the shard (the source map).
  bool emit_borrowed(size_t tensor, const uint8_t* data, size_t n) {
    check_cancel(cancel_);
    populate_pages(data, n);
    Chunk c;
    c.tensor = tensor;
    c.n = n;
    c.data = data;
    return queue_.push(std::move(c));
  }
  // A chunk that owns its first n bytes.
  bool emit_owned(size_t tensor, Buffer&& bytes, size_t n) {
    check_cancel(cancel_);
    Chunk c;
    c.tensor = tensor;
    c.n = n;
    c.owned = std::move(bytes);
    c.data = c.owned.bytes.get();
    return queue_.push(std::move(c));
  }

  void produce(size_t i) {
    const OutputTensor& t = shard_.tensors[i];
    switch (t.kind) {
      case OutputTensor::Kind::copy: {
        const TensorInfo& src = *t.src;
        for (uint64_t off = 0; off < src.nbytes; off += kCopyChunk) {
          const size_t n = size_t(std::min<uint64_t>(kCopyChunk, src.nbytes - off));
          read_ahead(src.data, src.nbytes, off, n);
          if (!emit_borrowed(i, src.data + off, n)) return;
        }
        return;
      }
      case OutputTensor::Kind::scalar: {
        Buffer b = buffers_.take(4);
        std::memcpy(b.bytes.get(), &t.value, 4);
        emit_owned(i, std::move(b), 4);
        return;
      }
      case OutputTensor::Kind::expert_weight: {
        // One expert, or gpt-oss's E experts of a stacked tensor in a row,
        // whose scales are then held together for the stacked _scales.
        size_t scale_bytes = 0;
        for (int k = 0; k < t.expert_count; ++k) {
          const ExpertSource& src = plan_.experts[size_t(t.expert + k)].source;
          scale_bytes += size_t(src.rows * target_scale_row_bytes(plan_.experts[size_t(t.expert + k)].op, src.cols));
        }
        pending_scales_n_ = scale_bytes;
        pending_scales_ = buffers_.take(pending_scales_n_);
        pending_scales_expert_ = t.expert;
        size_t at = 0;
        for (int k = 0; k < t.expert_count && !queue_.stopped(); ++k) {
          const ExpertItem& e = plan_.experts[size_t(t.expert + k)];
          convert_weight(i, e, pending_scales_.bytes.get() + at, &(*stats_)[size_t(t.expert + k)]);
          at += size_t(e.source.rows * target_scale_row_bytes(e.op, e.source.cols));
        }
        return;
      }
      case OutputTensor::Kind::expert_scale:
        if (pending_scales_expert_ != t.expert)
          fail(shard_.file, ": tensor ", t.spec.name, " is planned before its weight");  // a plan bug
        emit_owned(i, std::move(pending_scales_), pending_scales_n_);
        pending_scales_ = {};
        pending_scales_expert_ = -1;
        return;
    }
  }

  // Every block of this MXFP4 matrix is inside the cast's window, so its
  // NVFP4 bytes are the source's bytes (the cast's contract): they go out
  // straight from the source map like a copy, and only the block scales are
  // computed (expert_convert.h, cast_scales_in_window), all of them before
  // the first row goes out, so a scale the plan did not expect stops the
  // matrix before any of it is written.
  void cast_in_window(size_t i, const ExpertItem& e, int64_t rows_per_chunk, int64_t packed_row, uint8_t* scales,
                      ExpertStats* stats) {
    const int64_t rows = e.source.rows;
    stats->merge(cast_scales_in_window(e.source, e.params.k_max, 0, rows, scales, e.base));
    release_pages(e.source.scales, size_t(rows * e.source.cols / kMxfp4Block));
    for (int64_t r0 = 0; r0 < rows; r0 += rows_per_chunk) {
      const int64_t r1 = std::min(rows, r0 + rows_per_chunk);
      read_ahead(e.source.data, size_t(rows * packed_row), size_t(r0 * packed_row), size_t((r1 - r0) * packed_row));
      if (!emit_borrowed(i, e.source.data + r0 * packed_row, size_t((r1 - r0) * packed_row))) return;
    }
  }

  // Rows go out in chunks as they are converted; the block scales of the
  // whole matrix go to `scales` ([rows, scale row]), kept for the tensor
  // that follows.
  void convert_weight(size_t i, const ExpertItem& e, uint8_t* scales, ExpertStats* stats) {
    const int64_t rows = e.source.rows, cols = e.source.cols;
    const int64_t packed_row = target_packed_row_bytes(e.op, cols);
    const int64_t scale_row = target_scale_row_bytes(e.op, cols);
    const int64_t rows_per_chunk = std::max<int64_t>(1, int64_t(kConvertChunk) / std::max<int64_t>(1, packed_row));
    if (e.all_in_window) {
      cast_in_window(i, e, rows_per_chunk, packed_row, scales, stats);
      return;
    }
    std::vector<ExpertStats> part(size_t(pool_.size()));
    for (int64_t r0 = 0; r0 < rows; r0 += rows_per_chunk) {
      const int64_t r1 = std::min(rows, r0 + rows_per_chunk);
      const size_t n = size_t((r1 - r0) * packed_row);
      Buffer out = buffers_.take(n);
      const int64_t in_row = e.source.format == Format::bf16 ? cols * 2 : e.source.format == Format::f32 ? cols * 4 : cols / 2;
      prefetch_pages(e.source.data + r0 * in_row, size_t((r1 - r0) * in_row));
      std::vector<std::exception_ptr> errors(size_t(pool_.size()));
      pool_.parallel_for(
          r1 - r0,
          [&](int64_t a, int64_t b, int thread) {
            try {
              part[size_t(thread)].merge(convert_expert_rows(e.source, e.op, e.params, r0 + a, r0 + b,
                                                             out.bytes.get() + a * packed_row,
                                                             scales + (r0 + a) * scale_row,
                                                             e.base));
            } catch (...) {
              errors[size_t(thread)] = std::current_exception();
            }
          },
          /*grain=*/8);
      for (auto& err : errors)
        if (err) std::rethrow_exception(err);
      if (!emit_owned(i, std::move(out), n)) return;
    }
    for (const auto& p : part) stats->merge(p);
    const ExpertSource& src = e.source;
    const int64_t elem = src.format == Format::bf16 ? 2 : src.format == Format::f32 ? 4 : 0;
    release_pages(src.data, size_t(elem ? rows * cols * elem : rows * cols / 2));
    if (src.scales) release_pages(src.scales, size_t(rows * cols / (src.format == Format::nvfp4 ? 16 : 32)));
  }

  const ConvertPlan& plan_;
  const ShardPlan& shard_;
  ThreadPool& pool_;
  ChunkQueue& queue_;
  BufferPool& buffers_;
  const std::atomic<int>* cancel_;
  std::vector<ExpertStats>* stats_;
  Buffer pending_scales_;
  size_t pending_scales_n_ = 0;

 public:
  int pending_scales_expert_ = -1;
};

}  // namespace

ShardResult write_shard(const ConvertPlan& plan, const ShardPlan& shard, const std::string& path, ThreadPool& pool,
                        const ShardPipelineOptions& options, std::vector<ExpertStats>* expert_stats) {
  std::vector<TensorSpec> specs;
  specs.reserve(shard.tensors.size());
  for (const auto& t : shard.tensors) specs.push_back(t.spec);

  ShardResult result;
  {
    SafetensorsWriter writer(path, specs, shard.metadata);
    EarlyWriteback writeback(path + ".partial");  // the writer's file until finish()
    ChunkQueue queue(options.max_in_flight, options.max_borrowed);
    StreamHash hash;
    BufferPool buffers;
    Producer producer(plan, shard, pool, queue, buffers, options.cancel, expert_stats);
    std::thread thread([&] { producer.run(); });
    try {
      for (;;) {
        Chunk c = queue.pop();
        if (c.error) std::rethrow_exception(c.error);
        if (c.end) break;
        check_cancel(options.cancel);
        if (options.stop && options.stop->load(std::memory_order_relaxed)) throw ShardStopped();
        for (size_t off = 0; off < c.n; off += kWritePiece) {
          const size_t m = std::min(kWritePiece, c.n - off);
          hash.update(c.data + off, m);
          writer.write(specs[c.tensor].name, c.data + off, m);
        }
        if (c.owned.bytes) buffers.give(std::move(c.owned));
        else release_pages(c.data, c.n);  // a copy, straight from the source map
        if (options.on_written) options.on_written(c.n);
        writeback.wrote(c.n);
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
    result.offsets = writer.layout().offsets;
    result.digest = hash.digest();
  }
  result.tensors = std::move(specs);
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
  // Hash the data section through read-only mappings of 32 MB windows,
  // populated in one go: no copy into a buffer (a pread would cost one more
  // pass over memory), no per-page faults, and a bounded resident size. The
  // data was just written, so it is normally still in the page cache.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, ": cannot reopen for verification: ", std::strerror(errno));
  const uint64_t page = uint64_t(sysconf(_SC_PAGESIZE));
  StreamHash hash;
  uint64_t off = data_start;
  while (off < file_size) {
    const uint64_t base = off & ~(page - 1);
    const size_t len = size_t(std::min<uint64_t>(kVerifyWindow, file_size - base));
    void* m = ::mmap(nullptr, len, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, off_t(base));
    if (m == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      fail(path, ": cannot map ", len, " bytes at offset ", base, " to verify them: ", std::strerror(err));
    }
    hash.update(static_cast<const uint8_t*>(m) + (off - base), len - (off - base));
    ::munmap(m, len);
    off = base + len;
  }
  ::close(fd);
  if (hash.digest() != digest)
    fail(path, ": the data read back differs from the data written (checksum ", std::hex, hash.digest(), " != ",
         digest, "): the disk or file system corrupted it");
}

}  // namespace nibble
