// What every model's Model::step (and Model::draft_step) shares: the batch
// checked as a whole before anything runs (so a bad entry leaves every state
// as it was), then cut into sub-steps of at most the model's token budget,
// the sequences in order, each sub-step run by the model's own forward.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "model/backend.h"
#include "model/model.h"
#include "util/error.h"

namespace nibble {

// One sequence's part of a sub-step: tokens [from, from + count) of batch
// entry `seq`, whose state is `st`.
template <class State>
struct StepPart {
  const SeqStep* seq;
  State* st;
  int64_t from, count;
};

// A sub-step's tokens laid out sequence after sequence, as both forwards
// take them: ids and positions [T], the rows whose logits are wanted and
// where each row's logits go (the caller's buffer, [V] per row).
// A row drawn on the backend (SeqStep::draw) has a null logit_out; its
// settings and the place for its id are in draws / drawn, in row order.
struct StepTokens {
  std::vector<int32_t> ids;
  std::vector<int64_t> positions;
  std::vector<int64_t> logit_rows;
  std::vector<float*> logit_out;
  std::vector<DrawParams> draws;
  std::vector<int32_t*> drawn;
  bool decode = true;  // every sequence feeds one token (the profile's decode steps)
};

template <class State>
StepTokens lay_out_step(std::span<const StepPart<State>> parts, int64_t vocab_size) {
  StepTokens out;
  for (const StepPart<State>& p : parts) {
    const int64_t first = int64_t(out.ids.size()), n_seq = int64_t(p.seq->tokens.size());
    out.decode = out.decode && p.count == 1;
    for (int64_t t = 0; t < p.count; ++t) {
      out.ids.push_back(p.seq->tokens[size_t(p.from + t)]);
      out.positions.push_back(p.st->position() + t);
      const bool all = p.seq->rows == LogitRows::all;
      const bool last = p.seq->rows == LogitRows::last && p.from + t == n_seq - 1;
      if (all || last) {
        out.logit_rows.push_back(first + t);
        if (p.seq->draw) {
          out.logit_out.push_back(nullptr);
          out.draws.push_back(*p.seq->draw);
          out.drawn.push_back(p.seq->drawn);
        } else {
          out.logit_out.push_back(p.seq->logits + (all ? (p.from + t) * vocab_size : 0));
        }
      }
    }
  }
  return out;
}

// The wanted rows of a step's logits [rows, V] out of the backend: the rows
// with a buffer (out[r]) copied there (one download), the others (null
// out[r]) drawn where they are (Backend::draw_tokens), each id into its
// drawn[] in row order.
void deliver_logits(Backend& be, Tensor logits, std::span<float* const> out, std::span<const DrawParams> draws = {},
                    std::span<int32_t* const> drawn = {});

// Copies the sub-step's rows of `x` [T, width] that the batch entries asked
// for (SeqStep::hidden from hidden_first on) straight into their buffers:
// the residual stream a draft layer or a caller reads after the step.
template <class State>
void copy_hidden_rows(Backend& be, std::span<const StepPart<State>> parts, Tensor x, int64_t width) {
  int64_t first = 0;
  for (const StepPart<State>& p : parts) {
    const SeqStep& s = *p.seq;
    const int64_t j0 = std::max(p.from, s.hidden_first), j1 = p.from + p.count;
    if (s.hidden && j0 < j1)
      be.to_host(x.slice(first + j0 - p.from, j1 - j0), s.hidden + (j0 - s.hidden_first) * width);
    first += p.count;
  }
}

// After a sub-step's forward (StepPart or DraftStepPart): each part's state
// (a CachedState) keeps its tokens, ids [T] laid out sequence after
// sequence, and moves on.
template <class Part>
void advance_states(std::span<const Part> parts, std::span<const int32_t> ids) {
  int64_t first = 0;
  for (const Part& p : parts) {
    p.st->advance(ids.subspan(size_t(first), size_t(p.count)));
    first += p.count;
  }
}

// The model-independent checks of entry `i` of `batch`, whose state is at
// `position`: a state, not twice in the step, token ids in the vocabulary,
// room in the context, logits and hidden rows asked for consistently.
// Throws nibble::Error naming the sequence. `config_path` names where the
// context length came from.
void check_step_entry(std::span<const SeqStep> batch, size_t i, int64_t position, int64_t vocab_size,
                      int64_t max_position, const std::string& config_path);

// Checks every entry (state_of(entry) -> State&, which throws for a state of
// another model), then runs forward(parts) over sub-steps of at most
// `max_chunk` tokens: each sequence takes what is left of the budget, the
// rest waits for the next sub-step.
template <class State, class StateOf, class Forward>
void run_step_parts(std::span<const SeqStep> batch, int64_t vocab_size, int64_t max_position,
                    const std::string& config_path, int64_t max_chunk, StateOf state_of, Forward forward) {
  std::vector<StepPart<State>> todo;
  for (size_t i = 0; i < batch.size(); ++i) {
    const SeqStep& s = batch[i];
    if (!s.state) fail("sequence ", s.id, ": no state");
    State& st = state_of(s);
    check_step_entry(batch, i, st.position(), vocab_size, max_position, config_path);
    const int64_t n = int64_t(s.tokens.size());
    if (n > 0) todo.push_back(StepPart<State>{&s, &st, 0, n});
  }
  std::vector<StepPart<State>> parts;
  size_t next = 0;
  while (next < todo.size()) {
    parts.clear();
    int64_t used = 0;
    for (size_t i = next; i < todo.size() && used < max_chunk; ++i) {
      const StepPart<State>& p = todo[i];
      const int64_t take = std::min(max_chunk - used, int64_t(p.seq->tokens.size()) - p.from);
      parts.push_back(StepPart<State>{p.seq, p.st, p.from, take});
      used += take;
    }
    forward(std::span<const StepPart<State>>(parts));
    // parts are todo[next], todo[next + 1], ... in order; only the last can be partial.
    for (const StepPart<State>& done : parts) {
      StepPart<State>& p = todo[next];
      p.from += done.count;
      if (p.from == int64_t(p.seq->tokens.size())) ++next;
    }
  }
}

// ---- draft steps (Model::draft_step: a model's multi-token-prediction layer) ----

// One draft sequence's part of a draft sub-step: rows [from, from + count)
// of batch entry `seq`, whose draft state is `st`.
template <class State>
struct DraftStepPart {
  const DraftStep* seq;
  State* st;
  int64_t from, count;
};

// A draft sub-step's rows laid out sequence after sequence, as the draft
// forwards take them: ids (each row's next token) and positions [T], the
// rows whose logits are wanted and where they go ([V] per row), and the
// last row of each sequence that asked for hidden_out, with its buffer.
struct DraftTokens {
  std::vector<int32_t> ids;
  std::vector<int64_t> positions;
  std::vector<int64_t> logit_rows;
  std::vector<float*> logit_out;
  std::vector<int64_t> hidden_rows;
  std::vector<float*> hidden_out;
};

template <class State>
DraftTokens lay_out_draft_step(std::span<const DraftStepPart<State>> parts, int64_t vocab_size) {
  DraftTokens out;
  for (const DraftStepPart<State>& p : parts) {
    const int64_t first = int64_t(out.ids.size()), n_seq = int64_t(p.seq->tokens.size());
    for (int64_t t = 0; t < p.count; ++t) {
      const int64_t j = p.from + t;
      out.ids.push_back(p.seq->tokens[size_t(j)]);
      out.positions.push_back(p.st->position() + t);
      const bool all = p.seq->rows == LogitRows::all;
      const bool last = j == n_seq - 1;
      if (all || (last && p.seq->rows == LogitRows::last)) {
        out.logit_rows.push_back(first + t);
        out.logit_out.push_back(p.seq->logits + (all ? j * vocab_size : 0));
      }
      if (last && p.seq->hidden_out) {
        out.hidden_rows.push_back(first + t);
        out.hidden_out.push_back(p.seq->hidden_out);
      }
    }
  }
  return out;
}

// The model-independent checks of draft entry `i` of `batch`, whose state is
// at `position`: not twice in the step, token ids in the vocabulary, hidden
// rows for the tokens, room in the context, logits and hidden_out asked for
// consistently. Throws nibble::Error naming the draft sequence.
void check_draft_entry(std::span<const DraftStep> batch, size_t i, int64_t position, int64_t vocab_size,
                       int64_t max_position);

// As run_step_parts, for a draft step: draft_state_of(entry) -> State* (null:
// not a draft state of this model, an error here), every entry checked, then
// forward(parts) over sub-steps of at most `max_chunk` rows.
template <class State, class DraftStateOf, class Forward>
void run_draft_parts(std::span<const DraftStep> batch, int64_t vocab_size, int64_t max_position, int64_t max_chunk,
                     DraftStateOf draft_state_of, Forward forward) {
  std::vector<DraftStepPart<State>> todo;
  for (size_t i = 0; i < batch.size(); ++i) {
    const DraftStep& s = batch[i];
    if (!s.state) fail("draft sequence ", s.id, ": no state");
    State* st = draft_state_of(*s.state);
    if (!st) fail("draft sequence ", s.id, ": its state is not an MTP state of this model (new_draft_state())");
    check_draft_entry(batch, i, st->position(), vocab_size, max_position);
    const int64_t n = int64_t(s.tokens.size());
    if (n > 0) todo.push_back(DraftStepPart<State>{&s, st, 0, n});
  }
  std::vector<DraftStepPart<State>> parts;
  size_t next = 0;
  while (next < todo.size()) {
    parts.clear();
    int64_t used = 0;
    for (size_t i = next; i < todo.size() && used < max_chunk; ++i) {
      const DraftStepPart<State>& p = todo[i];
      const int64_t take = std::min(max_chunk - used, int64_t(p.seq->tokens.size()) - p.from);
      parts.push_back(DraftStepPart<State>{p.seq, p.st, p.from, take});
      used += take;
    }
    forward(std::span<const DraftStepPart<State>>(parts));
    for (const DraftStepPart<State>& done : parts) {
      DraftStepPart<State>& p = todo[next];
      p.from += done.count;
      if (p.from == int64_t(p.seq->tokens.size())) ++next;
    }
  }
}

}  // namespace nibble
