#include "model/cached_state.h"

#include <algorithm>

#include "util/error.h"

namespace nibble {

uint64_t CachedState::memory_bytes() const {
  uint64_t b = sizeof(*this) + sizeof(int32_t) * tokens_.capacity();
  for (const AttentionCachePtr& l : layers_) b += l->bytes();
  return b;
}

void CachedState::add_layer(std::unique_ptr<AttentionCache> c) {
  if (!c) fail("a sequence state's layer cache is missing (the backend made none)");
  layers_.emplace_back(std::move(c));
}

void CachedState::advance(std::span<const int32_t> tokens) {
  tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
  position_ += int64_t(tokens.size());
  update_floor();
}

bool CachedState::truncate_in_place(int64_t position, const char* what) {
  if (position < 0 || position > position_)
    fail("truncate to position ", position, ": ", what, " holds ", position_, " tokens (valid: 0 .. ", position_,
         ")");
  if (position < floor_) return false;
  if (position == position_) return true;
  for (AttentionCachePtr& l : layers_) l->truncate(position);
  position_ = position;
  tokens_.resize(size_t(position));
  update_floor();
  return true;
}

void CachedState::update_floor() {
  int64_t floor = 0;
  for (const AttentionCachePtr& l : layers_) floor = std::max(floor, l->truncate_floor());
  floor_ = std::min(floor, position_);
}

}  // namespace nibble
