// One sequence's cache for one attention layer, whatever the architecture:
// DeepSeek-V4's window ring and compressor states, gpt-oss's KV cache,
// DeepSeek-V3's latent cache. The backend makes it (Backend::
// new_attention_cache, new_gqa_cache, new_mla_cache) in its own memory, for
// that layer's weights and shape, which it keeps; only that backend's
// attention op of the same kind reads it. A model's sequence state holds one
// per layer (model/cached_state.h): fork clones them, truncate moves them
// back, memory_bytes adds them up.
#pragma once

#include <cstdint>
#include <memory>

#include "util/error.h"

namespace nibble {

class AttentionCache {
 public:
  virtual ~AttentionCache() = default;
  virtual std::unique_ptr<AttentionCache> clone() const = 0;
  // The earliest position truncate() reaches without refeeding, and the
  // truncation itself (floor <= p <= the current position).
  virtual int64_t truncate_floor() const = 0;
  virtual void truncate(int64_t p) = 0;
  virtual uint64_t bytes() const = 0;  // memory held, host or device
};

// An owned AttentionCache that copies by clone(), so that copying a state
// forks its caches.
class AttentionCachePtr {
 public:
  AttentionCachePtr() = default;
  explicit AttentionCachePtr(std::unique_ptr<AttentionCache> c) : c_(std::move(c)) {}
  AttentionCachePtr(const AttentionCachePtr& o) : c_(o.c_ ? o.c_->clone() : nullptr) {}
  AttentionCachePtr& operator=(const AttentionCachePtr& o) {
    if (this != &o) c_ = o.c_ ? o.c_->clone() : nullptr;
    return *this;
  }
  AttentionCachePtr(AttentionCachePtr&&) = default;
  AttentionCachePtr& operator=(AttentionCachePtr&&) = default;
  AttentionCache* get() const { return c_.get(); }
  AttentionCache* operator->() const { return c_.get(); }

 private:
  std::unique_ptr<AttentionCache> c_;
};

// `c` as the CPU backend's cache of type C (HostAttentionCache, HostGqaCache,
// HostMlaCache); `op` names the attention op in the error for a cache of
// another backend or of another kind of layer.
template <class C>
C& host_cache(AttentionCache* c, const char* op) {
  auto* h = dynamic_cast<C*>(c);
  if (!h) fail(op, ": the sequence's cache belongs to another backend, or another kind of layer, than this CPU op's");
  return *h;
}

}  // namespace nibble
