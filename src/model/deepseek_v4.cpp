#include "model/deepseek_v4.h"

#include <algorithm>

#include "model/forward_profile.h"
#include "util/error.h"

namespace nibble {

DeepseekV4Model::DeepseekV4Model(std::unique_ptr<Checkpoint> ck, const Detection& det, Plan plan,
                                 const LoadOptions& options)
    : ck_(std::move(ck)), plan_(std::move(plan)), max_chunk_(options.max_chunk_tokens), pool_(options.threads) {
  if (max_chunk_ <= 0) fail("max_chunk_tokens must be positive, got ", max_chunk_);
  if (plan_.device.hypothetical || plan_.device.kind != DeviceKind::cpu)
    fail("device ", plan_.device.name, ": nibble can only run DeepSeek-V4 on this machine's CPU (device host)");
  cfg_ = parse_deepseek_v4_config(ck_->config(), ck_->file_path("config.json"));
  w_ = bind_deepseek_v4_weights(*ck_, det, plan_, cfg_, options);
  rope_main_ = RopeTable(cfg_.rope_main, cfg_.rope_dim);
  rope_compress_ = RopeTable(cfg_.rope_compress, cfg_.rope_dim);
  hc_ = HcShape{cfg_.hc_mult, cfg_.hidden, cfg_.hc_sinkhorn_iters, float(cfg_.hc_eps), cfg_.rms_eps};
  attn_ = AttentionShape{cfg_.hidden, cfg_.n_heads, cfg_.head_dim, cfg_.rope_dim, cfg_.q_lora_rank,
                         cfg_.o_groups, cfg_.o_lora_rank, cfg_.sliding_window, cfg_.rms_eps};
}

std::unique_ptr<ModelState> DeepseekV4Model::new_state() const {
  auto st = std::make_unique<DeepseekV4State>();
  st->owner_ = this;
  st->layers_.resize(size_t(cfg_.n_layers));
  return st;
}

void DeepseekV4Model::forward(ModelState& state, std::span<const int32_t> tokens, float* logits,
                              bool all_logits) const {
  auto* st = dynamic_cast<DeepseekV4State*>(&state);
  if (!st || st->owner_ != this) fail("DeepSeek-V4 forward: the state belongs to another model");
  const int64_t n = int64_t(tokens.size());
  for (int64_t i = 0; i < n; ++i)
    if (tokens[size_t(i)] < 0 || tokens[size_t(i)] >= cfg_.vocab_size)
      fail("token ", i, " (id ", tokens[size_t(i)], ") is outside the vocabulary of ", cfg_.vocab_size);
  if (n > cfg_.max_position - st->position_)
    fail("the sequence would hold ", st->position_ + n, " tokens (", st->position_, " already, ", n,
         " more) but the model's context is ", cfg_.max_position, " tokens (max_position_embeddings in ",
         cfg_.path, ")");
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t V = cfg_.vocab_size;
  for (int64_t c0 = 0; c0 < n; c0 += max_chunk_) {
    const int64_t len = std::min(max_chunk_, n - c0);
    const bool last_chunk = c0 + len == n;
    // Logit rows wanted from this chunk: all of them, the last one, or none.
    float* out = nullptr;
    int64_t first = len;
    if (logits && all_logits) {
      out = logits + c0 * V;
      first = 0;
    } else if (logits && last_chunk) {
      out = logits;
      first = len - 1;
    }
    forward_chunk(*st, tokens.subspan(size_t(c0), size_t(len)), first, out);
  }
}

void DeepseekV4Model::forward_chunk(DeepseekV4State& st, std::span<const int32_t> tokens, int64_t first,
                                    float* logits) const {
  const int64_t n = int64_t(tokens.size());
  const int64_t N = cfg_.hc_mult, D = cfg_.hidden, p0 = st.position_;
  ThreadPool* pool = &pool_;
  forward_profile_begin(n);

  // Embedding, copied into each of the N residual streams: [n, N, D].
  std::vector<float> streams(size_t(n * N * D));
  {
    PhaseTimer _(Phase::embed);
    for (int64_t t = 0; t < n; ++t) {
    float* x = streams.data() + t * N * D;
    dequantize_row(w_.embed, tokens[size_t(t)], x);
    for (int64_t k = 1; k < N; ++k) std::copy(x, x + D, x + k * D);
    }
  }

  for (int64_t l = 0; l < cfg_.n_layers; ++l) {
    const bool compressed = cfg_.layer_types[size_t(l)] != AttnKind::sliding;
    block_forward(w_.layers[size_t(l)], hc_, attn_, compressed ? rope_compress_ : rope_main_, rope_compress_,
                  tokens.data(), n, p0, st.layers_[size_t(l)], streams.data(), pool);
  }
  st.position_ += n;
  if (!logits || first >= n) return;

  // Only the rows whose logits are wanted go through the head: [rows, V].
  const int64_t rows = n - first;
  std::vector<float> y(size_t(rows * D));
  {
    PhaseTimer _(Phase::hc);
    hc_head(w_.hc_head, hc_, streams.data() + first * N * D, rows, y.data(), pool);
  }
  {
    PhaseTimer _(Phase::norm);
    rms_norm(y.data(), rows, D, w_.norm.data(), cfg_.rms_eps, y.data());
  }
  PhaseTimer _(Phase::head);
  w_.head.run(y.data(), rows, logits, pool);
}

std::unique_ptr<Model> load_deepseek_v4(std::unique_ptr<Checkpoint> ck, const Detection& det, Plan plan,
                                        const LoadOptions& options) {
  // A checkpoint's config.json must state its dimensions: the HF defaults
  // (V4-Flash's 4096 hidden, 43 layers, ...) would only turn a missing field
  // into a confusing tensor-shape error. Other fields keep HF's defaults.
  for (const char* key : {"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads"})
    if (auto it = ck->config().find(key); it == ck->config().end() || it->is_null())
      fail(ck->file_path("config.json"), ": field \"", key, "\" is missing; a checkpoint must state its dimensions");
  return std::make_unique<DeepseekV4Model>(std::move(ck), det, std::move(plan), options);
}

}  // namespace nibble
