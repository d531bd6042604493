// The CUDA StoreTarget (pinned staging, cudaMemcpyAsync on a copy stream,
// one event per staging buffer) and the device views of the store's entries.
#include "kernels/cuda/weight_store_cuda.h"

#include <cuda_runtime.h>

#include "kernels/cuda/mma_layout.h"
#include "util/error.h"

namespace nibble {

namespace {

void check(cudaError_t e, int device, const char* what) {
  if (e != cudaSuccess) fail("weight store on cuda:", device, ": ", what, ": ", cudaGetErrorString(e));
}

class CudaTarget final : public StoreTarget {
 public:
  explicit CudaTarget(int device) : device_(device) {
    check(cudaSetDevice(device), device, "cudaSetDevice");
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), device, "cudaStreamCreate");
    for (auto& ev : events_) check(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), device, "cudaEventCreate");
  }
  ~CudaTarget() override {
    cudaStreamSynchronize(stream_);
    for (auto& ev : events_) cudaEventDestroy(ev);
    for (uint8_t* p : staging_)
      if (p) cudaFreeHost(p);
    cudaStreamDestroy(stream_);
    if (arena_ && !kept_) cudaFree(arena_);  // a failed upload frees what it took
  }
  std::string name() const override { return "cuda:" + std::to_string(device_); }
  void memory(uint64_t* free_bytes, uint64_t* total_bytes) override {
    size_t f = 0, t = 0;
    check(cudaMemGetInfo(&f, &t), device_, "cudaMemGetInfo");
    *free_bytes = f;
    *total_bytes = t;
  }
  uint8_t* allocate(uint64_t bytes) override {
    check(cudaMalloc(&arena_, std::max<uint64_t>(bytes, 1)), device_, "cudaMalloc of the weights");
    return static_cast<uint8_t*>(arena_);
  }
  uint8_t* staging(int i, uint64_t bytes) override {
    if (!staging_[i]) {
      void* p = nullptr;
      check(cudaHostAlloc(&p, bytes, cudaHostAllocDefault), device_, "cudaHostAlloc (pinned staging)");
      staging_[i] = static_cast<uint8_t*>(p);
    }
    return staging_[i];
  }
  void copy_async(int i, uint8_t* dst, uint64_t n) override {
    check(cudaMemcpyAsync(dst, staging_[i], n, cudaMemcpyHostToDevice, stream_), device_, "cudaMemcpyAsync");
    check(cudaEventRecord(events_[i], stream_), device_, "cudaEventRecord");
    pending_[i] = true;
  }
  void wait(int i) override {
    if (pending_[i]) check(cudaEventSynchronize(events_[i]), device_, "weight copy");
    pending_[i] = false;
  }
  void finish() override { check(cudaStreamSynchronize(stream_), device_, "weight copies"); }
  void keep() { kept_ = true; }

 private:
  int device_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t events_[2] = {};
  uint8_t* staging_[2] = {nullptr, nullptr};
  bool pending_[2] = {false, false};
  void* arena_ = nullptr;
  bool kept_ = false;
};

}  // namespace

std::unique_ptr<CudaWeightStore> CudaWeightStore::load(const std::vector<StoreEntry>& entries, int device,
                                                       uint64_t reserve_bytes, const StoreProgress& progress,
                                                       uint64_t staging_bytes, ThreadPool* pool) {
  std::unique_ptr<CudaWeightStore> store(new CudaWeightStore());
  store->device_ = device;
  CudaTarget target(device);
  store->upload_ = upload_weight_store(entries, target, reserve_bytes, staging_bytes, progress, pool);
  target.keep();
  for (const StoreEntry& e : entries) {
    if (e.views.empty()) store->shapes_.push_back({e.layout, Format::int_index, 0, 0, 0});
    else store->shapes_.push_back({e.layout, e.views[0].format, e.views[0].rows, e.views[0].cols,
                                   int64_t(e.views.size())});
  }
  return store;
}

CudaWeightStore::~CudaWeightStore() {
  if (upload_.base) {
    cudaSetDevice(device_);
    cudaFree(upload_.base);
  }
}

std::vector<uint8_t> CudaWeightStore::download() const {
  std::vector<uint8_t> host(upload_.plan.total_bytes);
  check(cudaSetDevice(device_), device_, "cudaSetDevice");
  check(cudaMemcpy(host.data(), upload_.base, host.size(), cudaMemcpyDeviceToHost), device_, "cudaMemcpy to host");
  return host;
}

W4A16ExpertsDevice CudaWeightStore::experts(size_t i) const {
  const Shape& s = shapes_.at(i);
  if (s.layout != DeviceLayout::w4a16) fail("weight store: entry ", i, " is not in the w4a16 layout");
  W4A16ExpertsDevice d;
  d.format = s.format;
  d.experts = s.count;
  d.rows = s.rows;
  d.cols = s.cols;
  d.rows_padded = w4a16::round_up(s.rows, w4a16::kTileRows);
  d.cols_padded = w4a16::round_up(s.cols, w4a16::kChunkK);
  d.words = reinterpret_cast<const uint32_t*>(upload_.part(i, 0));
  d.scales = upload_.part(i, 1);
  d.global_scales = reinterpret_cast<const float*>(upload_.part(i, 2));
  return d;
}

MmaWeightsDevice CudaWeightStore::linear(size_t i) const {
  const Shape& s = shapes_.at(i);
  if (s.layout != DeviceLayout::mma || s.count != 1)
    fail("weight store: entry ", i, " is not one matrix in the mma layout");
  const bool fp8 = s.format == Format::fp8_block128;
  MmaWeightsDevice d;
  d.format = s.format;
  d.rows = s.rows;
  d.cols = s.cols;
  d.rows_padded = mma::round_up(s.rows, mma::kTileRows);
  d.cols_padded = mma::round_up(s.cols, mma::chunk_k(fp8));
  d.col_blocks = fp8 ? (s.cols + mma::kScaleBlock - 1) / mma::kScaleBlock : 0;
  d.words = upload_.part(i, 0);
  d.scales = fp8 ? reinterpret_cast<const float*>(upload_.part(i, 1)) : nullptr;
  return d;
}

}  // namespace nibble
