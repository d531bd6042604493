#include "model/step_parts.h"

#include "util/error.h"

namespace nibble {

void check_step_entry(std::span<const SeqStep> batch, size_t i, int64_t position, int64_t vocab_size,
                      int64_t max_position, const std::string& config_path) {
  const SeqStep& s = batch[i];
  for (size_t j = 0; j < i; ++j)
    if (batch[j].state == s.state) fail("sequence ", s.id, " appears twice in one step");
  const int64_t n = int64_t(s.tokens.size());
  for (int64_t t = 0; t < n; ++t)
    if (s.tokens[size_t(t)] < 0 || s.tokens[size_t(t)] >= vocab_size)
      fail("sequence ", s.id, ": token ", t, " (id ", s.tokens[size_t(t)], ") is outside the vocabulary of ",
           vocab_size);
  if (n > max_position - position)
    fail("sequence ", s.id, ": it would hold ", position + n, " tokens (", position, " already, ", n,
         " more) but the model's context is ", max_position, " tokens (max_position_embeddings in ", config_path,
         ")");
  if (s.rows != LogitRows::none && n == 0) fail("sequence ", s.id, ": logits wanted but no token is fed");
  if (s.draw) {
    if (s.rows != LogitRows::last || s.logits || !s.drawn)
      fail("sequence ", s.id, ": a drawn token needs rows = last, no logits buffer and a place for the id");
  } else if (s.rows != LogitRows::none && !s.logits) {
    fail("sequence ", s.id, ": logits wanted but no buffer given");
  }
  if (s.hidden && (s.hidden_first < 0 || s.hidden_first > n))
    fail("sequence ", s.id, ": hidden_first ", s.hidden_first, " is outside its ", n, " tokens");
}

void check_draft_entry(std::span<const DraftStep> batch, size_t i, int64_t position, int64_t vocab_size,
                       int64_t max_position) {
  const DraftStep& s = batch[i];
  for (size_t j = 0; j < i; ++j)
    if (batch[j].state == s.state) fail("draft sequence ", s.id, " appears twice in one step");
  const int64_t n = int64_t(s.tokens.size());
  for (int64_t t = 0; t < n; ++t)
    if (s.tokens[size_t(t)] < 0 || s.tokens[size_t(t)] >= vocab_size)
      fail("draft sequence ", s.id, ": token ", t, " (id ", s.tokens[size_t(t)], ") is outside the vocabulary of ",
           vocab_size);
  if (n > 0 && !s.hidden) fail("draft sequence ", s.id, ": no hidden rows given for its ", n, " tokens");
  if (n > max_position - position)
    fail("draft sequence ", s.id, ": it would hold ", position + n, " rows but the context is ", max_position);
  if (s.rows != LogitRows::none && n == 0) fail("draft sequence ", s.id, ": logits wanted but no token is fed");
  if (s.rows != LogitRows::none && !s.logits) fail("draft sequence ", s.id, ": logits wanted but no buffer given");
  if (s.hidden_out && n == 0) fail("draft sequence ", s.id, ": hidden_out wanted but no token is fed");
}

void deliver_logits(Backend& be, Tensor logits, std::span<float* const> out, std::span<const DrawParams> draws,
                    std::span<int32_t* const> drawn) {
  if (int64_t(out.size()) != logits.rows || draws.size() != drawn.size())
    fail("deliver_logits: ", out.size(), " buffers and ", draws.size(), " draws for ", logits.rows, " rows");
  if (draws.empty()) {
    be.to_host_rows(logits, out);
    return;
  }
  std::vector<int64_t> host_rows, draw_rows;
  std::vector<float*> host_out;
  for (size_t r = 0; r < out.size(); ++r) {
    if (out[r]) {
      host_rows.push_back(int64_t(r));
      host_out.push_back(out[r]);
    } else {
      draw_rows.push_back(int64_t(r));
    }
  }
  if (draw_rows.size() != draws.size())
    fail("deliver_logits: ", draw_rows.size(), " rows without a buffer for ", draws.size(), " draws");
  // Each kind of row on its own: the rows to copy, then the rows to draw.
  auto rows_of = [&](const std::vector<int64_t>& rows) {
    if (int64_t(rows.size()) == logits.rows) return logits;
    Tensor picked = be.alloc(int64_t(rows.size()), logits.cols);
    be.gather_rows(logits, rows, picked);
    return picked;
  };
  if (!host_rows.empty()) be.to_host_rows(rows_of(host_rows), host_out);
  std::vector<int32_t> ids(draws.size());
  be.draw_tokens(rows_of(draw_rows), draws, ids);
  for (size_t i = 0; i < ids.size(); ++i) *drawn[i] = ids[i];
}

}  // namespace nibble
