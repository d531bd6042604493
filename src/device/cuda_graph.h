// The CUDA runtime's graph calls the CUDA backend's step graphs make
// (model/cuda_step_graph.h): capture a stream's work into a graph, turn it
// into an executable graph (or update one made from a graph of the same
// shape), launch it. Behind this header so that the host logic compiles
// without nvcc (the _nocuda stand-ins say "built without CUDA") and is
// tested on the CPU. Errors throw nibble::Error naming the call and CUDA's
// reason.
#pragma once

#include <cstddef>

namespace nibble {

// Starts capturing `stream` (relaxed mode: other threads' CUDA calls go on;
// this stream's work is recorded, not run, until the capture ends).
void cuda_capture_begin(void* stream);
// Ends the capture: the graph of the work queued since it began, or null
// when none was. Throws when the capture was invalidated (an operation a
// graph cannot hold was queued on the stream meanwhile).
void* cuda_capture_end(void* stream);
size_t cuda_graph_nodes(void* graph);
void* cuda_graph_instantiate(void* graph);
// Gives `exec` the parameters of `graph` (kernel arguments, grids, copy
// addresses) when both have one topology; false when they do not (exec is
// then unchanged and must not be launched for this graph).
bool cuda_graph_update(void* exec, void* graph);
void cuda_graph_launch(void* exec, void* stream);
void cuda_graph_destroy(void* graph);      // null is fine; never throws
void cuda_graph_exec_destroy(void* exec);  // null is fine; never throws

}  // namespace nibble
