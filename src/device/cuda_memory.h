// The few CUDA runtime calls the CUDA backend (model/cuda_backend.*) makes
// from plain C++: device allocations, a stream, asynchronous copies on it.
// Behind this header so that the backend compiles without nvcc (the
// _nocuda stand-ins say "built without CUDA") and its host logic is tested
// on the CPU. Errors throw nibble::Error naming the call and CUDA's reason.
#pragma once

#include <cstddef>

namespace nibble {

// The calling thread's current device (cudaSetDevice): allocations, streams
// and launches go to it. Per host thread, so a backend sets it again on
// each entry a server's worker thread may make.
void cuda_set_device(int index);

void* cuda_device_alloc(size_t bytes);  // on the current device; throws with the size when it fails
void cuda_device_free(void* p);         // null is fine; synchronises the device (cudaFree); never throws

void* cuda_stream_create();             // a non-blocking stream
void cuda_stream_destroy(void* stream);
void cuda_stream_sync(void* stream);    // throws on an error of any work queued on it

// Copies on `stream`; the host side of an upload may be reused once the call
// returns (pageable memory is staged by the driver before it returns; the
// driver also waits for the stream first, so an upload from pageable memory
// is a host synchronisation: pinned staging is part of the graph work).
void cuda_upload_async(void* dst, const void* src, size_t bytes, void* stream);
void cuda_download(void* dst, const void* src, size_t bytes, void* stream);  // waits for the stream first
void cuda_memset_async(void* dst, int value, size_t bytes, void* stream);
void cuda_copy_async(void* dst, const void* src, size_t bytes, void* stream);  // device to device

}  // namespace nibble
