#include "device/cuda_graph.h"

#include <cuda_runtime.h>

#include "device/cuda_check.cuh"
#include "util/error.h"

namespace nibble {

namespace {
constexpr CudaCheck check{"cuda graph"};
cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }
}  // namespace

void cuda_capture_begin(void* stream) {
  check(cudaStreamBeginCapture(as_stream(stream), cudaStreamCaptureModeRelaxed), "cudaStreamBeginCapture");
}

void* cuda_capture_end(void* stream) {
  cudaGraph_t g = nullptr;
  const cudaError_t e = cudaStreamEndCapture(as_stream(stream), &g);
  if (e != cudaSuccess) {
    if (g) cudaGraphDestroy(g);
    (void)cudaGetLastError();  // the capture's error is reported here, not left for the next call
    fail("cuda graph: the step's capture failed (", cudaGetErrorString(e),
         "): its work did not run; rerun with --no-cuda-graphs and report this");
  }
  size_t n = 0;
  if (g && cudaGraphGetNodes(g, nullptr, &n) == cudaSuccess && n == 0) {
    cudaGraphDestroy(g);
    return nullptr;
  }
  return g;
}

size_t cuda_graph_nodes(void* graph) {
  size_t n = 0;
  check(cudaGraphGetNodes(static_cast<cudaGraph_t>(graph), nullptr, &n), "cudaGraphGetNodes");
  return n;
}

void* cuda_graph_instantiate(void* graph) {
  cudaGraphExec_t x = nullptr;
  check(cudaGraphInstantiate(&x, static_cast<cudaGraph_t>(graph), 0), "cudaGraphInstantiate");
  return x;
}

bool cuda_graph_update(void* exec, void* graph) {
  cudaGraphExecUpdateResultInfo info{};
  const cudaError_t e =
      cudaGraphExecUpdate(static_cast<cudaGraphExec_t>(exec), static_cast<cudaGraph_t>(graph), &info);
  if (e == cudaSuccess) return true;
  // A refused update is an answer, not an error: clear it so the next call
  // does not report it.
  (void)cudaGetLastError();
  if (e == cudaErrorGraphExecUpdateFailure) return false;
  check(e, "cudaGraphExecUpdate");
  return false;
}

void cuda_graph_launch(void* exec, void* stream) {
  check(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec), as_stream(stream)), "cudaGraphLaunch");
}

void cuda_graph_destroy(void* graph) {
  if (graph) cudaGraphDestroy(static_cast<cudaGraph_t>(graph));
}

void cuda_graph_exec_destroy(void* exec) {
  if (exec) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec));
}

}  // namespace nibble
