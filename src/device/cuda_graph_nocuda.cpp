// The graph calls in a build without CUDA: they say so. Compiled only when
// the .cu files are not (cmake/cuda.cmake).
#include "device/cuda_graph.h"
#include "util/error.h"

namespace nibble {

namespace {
[[noreturn]] void no_cuda() {
  fail("cuda graph: nibble was built without CUDA (configure with -DNIBBLE_CUDA=ON on a machine with nvcc)");
}
}  // namespace

void cuda_capture_begin(void*) { no_cuda(); }
void* cuda_capture_end(void*) { no_cuda(); }
size_t cuda_graph_nodes(void*) { no_cuda(); }
void* cuda_graph_instantiate(void*) { no_cuda(); }
bool cuda_graph_update(void*, void*) { no_cuda(); }
void cuda_graph_launch(void*, void*) { no_cuda(); }
void cuda_graph_destroy(void*) {}
void cuda_graph_exec_destroy(void*) {}

}  // namespace nibble
