// The sequence state every model here keeps: one backend-made attention
// cache per layer, the position, the tokens fed, and the floor down to which
// truncation moves the caches back in place. Below the floor a model feeds
// the kept prefix (tokens()) again into a fresh state. The models' main and
// draft states derive from it, each a type of its own, so that owned_state
// tells them apart. Copying one forks its caches (AttentionCachePtr).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "model/attention_cache.h"
#include "model/model.h"

namespace nibble {

class CachedState : public ModelState {
 public:
  int64_t position() const override { return position_; }
  int64_t truncate_floor() const override { return floor_; }
  uint64_t memory_bytes() const override;

  int64_t layers() const { return int64_t(layers_.size()); }
  AttentionCache* layer(int64_t l) const { return layers_[size_t(l)].get(); }
  std::span<const int32_t> tokens() const { return tokens_; }

  // Model::new_state adds one cache per layer.
  void add_layer(std::unique_ptr<AttentionCache> c);
  // After a forward fed `tokens` at position(): keeps them and moves on.
  void advance(std::span<const int32_t> tokens);
  // Back to `position`. In place (every cache truncated) when position >=
  // truncate_floor(): returns true. Below the floor returns false and changes
  // nothing: the caller feeds tokens()[0, position) into a fresh state.
  // Throws for a position outside [0, position()]; `what` names the state in
  // the message ("the sequence", "the MTP draft state").
  bool truncate_in_place(int64_t position, const char* what);

 private:
  void update_floor();

  int64_t position_ = 0;
  int64_t floor_ = 0;                      // max over layers of AttentionCache::truncate_floor, <= position_
  std::vector<int32_t> tokens_;            // every token fed: [position_]
  std::vector<AttentionCachePtr> layers_;  // from the model's backend
};

// Truncation below the floor: `st` (a state of `model`, of type S) becomes a
// fresh state fed st.tokens()[0, position) again (a prefill of `position`
// tokens).
template <class S>
void refeed_prefix(const Model& model, S& st, int64_t position) {
  const std::vector<int32_t> prefix(st.tokens().begin(), st.tokens().begin() + position);
  std::unique_ptr<ModelState> fresh = model.new_state();
  model.forward(*fresh, prefix, nullptr, false);
  st = std::move(static_cast<S&>(*fresh));
}

}  // namespace nibble
