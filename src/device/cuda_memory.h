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

void* cuda_host_alloc(size_t bytes);    // page-locked host memory (cudaMallocHost); throws with the size
void cuda_host_free(void* p);           // null is fine; never throws

void* cuda_stream_create();             // a non-blocking stream
void cuda_stream_destroy(void* stream);
void cuda_stream_sync(void* stream);    // throws on an error of any work queued on it

// Copies on `stream`. From pageable memory the driver stages the bytes
// before it returns (the host side may be reused at once) but waits for the
// stream first: a host synchronisation. From pinned memory (cuda_host_alloc)
// the copy is only queued, and the host side must stay put until the stream
// has run it (the CUDA backend's StagingArena).
void cuda_upload_async(void* dst, const void* src, size_t bytes, void* stream);
void cuda_download(void* dst, const void* src, size_t bytes, void* stream);  // waits for the stream first
void cuda_memset_async(void* dst, int value, size_t bytes, void* stream);
void cuda_copy_async(void* dst, const void* src, size_t bytes, void* stream);  // device to device

}  // namespace nibble
