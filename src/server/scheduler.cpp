#include "server/scheduler.h"

#include <algorithm>
#include <cmath>
#include <exception>

#include "server/api_error.h"
#include "util/error.h"

namespace nibble::server {
namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// log-softmax of `logits` [vocab] at `token`, and the `k` most likely tokens.
TokenLogprob log_probs(const float* logits, int64_t vocab, int32_t token, int64_t k) {
  float max = logits[0];
  for (int64_t i = 1; i < vocab; ++i) max = std::max(max, logits[i]);
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(double(logits[i]) - max);
  const double lse = double(max) + std::log(sum);
  TokenLogprob out;
  out.token = token;
  out.logprob = float(double(logits[token]) - lse);
  // The top k by one pass with a small sorted list (k <= 20).
  std::vector<int32_t> top;
  auto better = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  for (int64_t i = 0; i < vocab && k > 0; ++i) {
    const int32_t id = int32_t(i);
    if (int64_t(top.size()) == k && !better(id, top.back())) continue;
    top.insert(std::upper_bound(top.begin(), top.end(), id, better), id);
    if (int64_t(top.size()) > k) top.pop_back();
  }
  for (int32_t id : top) out.top.push_back({id, float(double(logits[id]) - lse)});
  return out;
}

}  // namespace

// ---- Job: the hand-over between the scheduler and an HTTP thread ----------

bool Job::wait(JobUpdate& out, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  end_only_ = false;
  if (!cv_.wait_for(lock, timeout, [&] { return news_ || (done_ && !done_read_); })) return false;
  take(out);
  return true;
}

bool Job::wait_end(JobUpdate& out, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  end_only_ = true;
  cv_.wait_for(lock, timeout, [&] { return done_ && !done_read_; });
  if (!news_ && !(done_ && !done_read_)) return false;
  take(out);
  return true;
}

void Job::take(JobUpdate& out) {
  out.text = std::move(pending_);
  pending_.clear();
  out.logprobs = std::move(pending_logprobs_);
  pending_logprobs_.clear();
  out.completion_tokens = tokens_;
  out.done = done_;
  out.finish_reason = finish_;
  out.error = error_;
  news_ = false;
  if (done_) done_read_ = true;
}

void Job::publish(const std::string& text, int64_t tokens, const char* finish, const std::string& error) {
  bool wake = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    wake = finish || !end_only_;  // a reader waiting for the end only is not woken per token
    pending_ += text;
    tokens_ = tokens;
    if (finish) {
      done_ = true;
      finish_ = finish;
      error_ = error;
    }
    news_ = true;
  }
  if (wake) cv_.notify_all();
}

// ---- Scheduler --------------------------------------------------------------

Scheduler::Scheduler(Engine& engine, int parallel, int max_queue, int64_t cache_tokens, int64_t draft_tokens)
    : engine_(engine), parallel_(size_t(std::max(1, parallel))), max_queue_(size_t(std::max(0, max_queue))),
      cache_limit_(std::max<int64_t>(0, cache_tokens)), draft_tokens_(std::max<int64_t>(0, draft_tokens)),
      eos_(engine.eos_token_ids()) {
  if (draft_tokens_ > 0)
    if (const std::string why = engine.draft_unavailable(); !why.empty())
      throw Error("--spec-draft-tokens " + std::to_string(draft_tokens_) +
                  ": speculative decoding needs the model's MTP layer: " + why);
  stats_.draft_tokens = draft_tokens_;
  stats_.spec.drafted.assign(size_t(draft_tokens_), 0);
  stats_.spec.accepted.assign(size_t(draft_tokens_), 0);
  // generation_config.json's eos_token_id ends replies too, as in `nibble run`.
  for (int64_t t : engine.generation_defaults().stop_tokens)
    if (std::find(eos_.begin(), eos_.end(), t) == eos_.end()) eos_.push_back(t);
  thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() { shutdown(); }

std::shared_ptr<Job> Scheduler::submit(JobParams params) { return submit(std::move(params), 1).front(); }

std::vector<std::shared_ptr<Job>> Scheduler::submit(JobParams params, int64_t n) {
  if (n < 1 || size_t(n) > parallel_)
    throw ApiError(400, "invalid_request_error",
                   "n is " + std::to_string(n) + ", but this server runs at most " + std::to_string(parallel_) +
                       " sequences at once (--parallel)",
                   "n");
  std::vector<std::shared_ptr<Job>> group;
  for (int64_t i = 0; i < n; ++i) {
    JobParams p = params;
    p.sampling.seed = params.sampling.seed + uint64_t(i);
    group.push_back(std::make_shared<Job>(std::move(p)));
    if (i > 0) {
      group.back()->follower_ = true;
      group.front()->followers_.push_back(group.back());
    }
  }
  const auto& job = group.front();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) throw ApiError(503, "unavailable_error", "the server is shutting down");
    // Jobs beyond the running ones wait; the queue counts only those.
    const size_t free_slots = parallel_ - std::min(parallel_, size_t(stats_.running));
    if (waiting_.size() >= max_queue_ + free_slots)
      throw ApiError(503, "unavailable_error",
                     "the server is busy: " + std::to_string(stats_.running) + " requests running and " +
                         std::to_string(waiting_.size()) + " waiting (--max-queue " + std::to_string(max_queue_) +
                         "); retry later");
    waiting_.push_back(job);
    stats_.waiting = int64_t(waiting_.size());
  }
  cv_.notify_one();
  return group;
}

void Scheduler::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

SchedulerStats Scheduler::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

// Moves waiting jobs into free slots; drops cancelled waiting ones. Blocks
// while there is nothing to do. Returns false once shutdown() was called
// (everything still queued is then cancelled).
bool Scheduler::admit(std::vector<std::shared_ptr<Job>>& running) {
  std::vector<std::shared_ptr<Job>> dropped;
  bool stop = false;
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return stopping_ || !waiting_.empty() || !running.empty(); });
    stop = stopping_;
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      if (stop || (*it)->cancelled()) {
        dropped.push_back(*it);
        it = waiting_.erase(it);
      } else {
        ++it;
      }
    }
    // A group (n > 1) enters whole.
    while (!waiting_.empty() && running.size() + 1 + waiting_.front()->followers_.size() <= parallel_) {
      running.push_back(waiting_.front());
      for (auto& f : waiting_.front()->followers_) running.push_back(f);
      waiting_.pop_front();
    }
    stats_.waiting = int64_t(waiting_.size());
  }
  for (auto& job : dropped) finish(*job, "cancelled");  // its followers too
  return !stop;
}

void Scheduler::start(Job& job) {
  job.started_ = true;
  // The kept state sharing the longest prefix with this prompt (one token at
  // least must still be fed, for the logits to sample from). A state that
  // goes past the shared prefix (a finished reply re-encoded differently at
  // its end, two prompts after one system prompt) is forked and truncated
  // back to it, when that is within the states' rollback reach (free; a
  // deeper truncation would refeed the prefix, no better than a prefill).
  const auto& prompt = job.params.prompt;
  const size_t reach = size_t(std::max<int64_t>(0, engine_.rollback_tokens()));
  auto best = cache_.end();
  size_t best_len = 0;
  for (auto it = cache_.begin(); it != cache_.end(); ++it) {
    const size_t limit = std::min(it->tokens.size(), prompt.size() - 1);
    const size_t l = size_t(std::mismatch(it->tokens.begin(), it->tokens.begin() + std::ptrdiff_t(limit),
                                          prompt.begin()).first - it->tokens.begin());
    if (l == 0 || it->tokens.size() - l > reach || l <= best_len) continue;
    // A truncated fork starts its draft track cold (Engine::truncate), and a
    // sampled reply under speculation depends on the drafts it was offered:
    // the same seeded request would then give another reply than it did on
    // a fresh state. Greedy replies do not depend on the drafts.
    if (draft_tokens_ > 0 && job.params.sampling.temperature != 0 && l < it->tokens.size()) continue;
    best = it;
    best_len = l;
  }
  if (best != cache_.end()) {
    cache_.splice(cache_.begin(), cache_, best);
    job.seq_ = engine_.fork(best->seq);
    if (best_len < best->tokens.size()) engine_.truncate(job.seq_, int64_t(best_len));
    job.fed_ = best_len;
    job.cached_tokens_.store(int64_t(job.fed_));
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.cache_hits;
  } else {
    job.seq_ = engine_.create();
    // Forks (the prefix cache above, n > 1 choices) inherit it.
    if (draft_tokens_ > 0) engine_.enable_draft(job.seq_);
  }
  job.text_ = std::make_unique<TextStream>(
      [this](std::span<const int32_t> ids) { return engine_.detokenize(ids); }, job.params.stop);
}

void Scheduler::finish(Job& job, const char* reason, const std::string& error) {
  if (job.ended_) return;
  job.ended_ = true;
  const std::string why = reason;
  // What was held back (a possible stop-string start) is sent, unless a
  // stop string or the client ended the job.
  const bool keep = why == "stop" || why == "length";
  if (job.seq_ >= 0) {
    // A finished reply's state (prompt + reply) is kept for the next turn.
    if (!(keep && remember(job.seq_))) engine_.release(job.seq_);
    job.seq_ = -1;
  }
  // Choices that have not forked the prompt yet cannot start without it.
  for (auto& f : job.followers_)
    if (!f->started_) finish(*f, reason, error);
  const std::string rest = keep && job.text_ ? job.text_->flush() : "";
  {
    // Counted before the reader hears of the end, so /metrics read after a
    // reply includes it.
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.finished;
    if (why == "cancelled") ++stats_.cancelled;
    if (keep) {
      stats_.e2e.observe(seconds(Clock::now() - job.submitted));
      if (job.generated_ >= 2)
        stats_.tpot.observe(seconds(job.last_token_ - job.first_token_) / double(job.generated_ - 1));
    }
  }
  job.publish(rest, job.generated_, reason, error);
}

// The other choices of a group fork the first job's state once its prompt
// is fed (before it samples, so every fork starts unseeded).
void Scheduler::fork_followers(Job& leader) {
  for (auto& f : leader.followers_) {
    if (f->ended_) continue;
    f->started_ = true;
    f->seq_ = engine_.fork(leader.seq_);
    engine_.reseed(f->seq_);
    f->fed_ = leader.fed_;
    f->cached_tokens_.store(leader.cached_tokens());
    f->text_ = std::make_unique<TextStream>(
        [this](std::span<const int32_t> ids) { return engine_.detokenize(ids); }, f->params.stop);
  }
}

// Keeps a fork of a job whose prompt was just fed.
void Scheduler::remember_prompt(const Job& job) {
  const auto& prompt = job.params.prompt;
  if (!cacheable(prompt)) return;
  const SeqId copy = engine_.fork(job.seq_);
  if (!remember(copy)) engine_.release(copy);
}

bool Scheduler::cacheable(const std::vector<int32_t>& tokens) const {
  return cache_limit_ > 0 && !tokens.empty() && int64_t(tokens.size()) <= cache_limit_;
}

// Takes `seq` into the cache under the tokens it has fed, evicting the least
// recently used entries past the bound; false (the caller keeps `seq`) when
// it is not cacheable or the same tokens are kept already.
bool Scheduler::remember(SeqId seq) {
  std::vector<int32_t> tokens = engine_.tokens(seq);
  if (!cacheable(tokens)) return false;
  for (auto it = cache_.begin(); it != cache_.end(); ++it) {
    if (it->tokens == tokens) {
      cache_.splice(cache_.begin(), cache_, it);
      return false;
    }
  }
  cache_held_ += int64_t(tokens.size());
  cache_.push_front({std::move(tokens), seq});
  while (cache_held_ > cache_limit_ || cache_.size() > kMaxCacheEntries) {
    cache_held_ -= int64_t(cache_.back().tokens.size());
    engine_.release(cache_.back().seq);
    cache_.pop_back();
  }
  std::lock_guard<std::mutex> lock(mu_);
  stats_.cache_entries = int64_t(cache_.size());
  stats_.cache_tokens = cache_held_;
  return true;
}

void Scheduler::clear_cache() {
  for (auto& c : cache_) engine_.release(c.seq);
  cache_.clear();
  cache_held_ = 0;
}

// One sampled token: send its text, or end the job.
void Scheduler::on_token(Job& job, int32_t token, const float* logits) {
  ++job.generated_;
  const auto now = Clock::now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (job.generated_ == 1) stats_.ttft.observe(seconds(now - job.submitted));
    else stats_.itl.observe(seconds(now - job.last_token_));
  }
  if (job.generated_ == 1) job.first_token_ = now;
  job.last_token_ = now;
  if (std::find(eos_.begin(), eos_.end(), int64_t(token)) != eos_.end()) return finish(job, "stop");
  const std::vector<int32_t>& stops = job.params.stop_tokens;
  if (std::find(stops.begin(), stops.end(), token) != stops.end()) return finish(job, "stop");
  if (job.params.top_logprobs >= 0) {
    TokenLogprob lp = log_probs(logits, engine_.vocab_size(), token, job.params.top_logprobs);
    std::lock_guard<std::mutex> lock(job.mu_);
    job.pending_logprobs_.push_back(std::move(lp));
  }
  const std::string text = job.text_->push(token);
  if (job.text_->stopped()) {
    job.publish(text, job.generated_, nullptr);
    return finish(job, "stop");
  }
  if (job.generated_ >= job.params.max_tokens) {
    job.publish(text, job.generated_, nullptr);
    return finish(job, "length");
  }
  job.next_token_ = token;
  if (!text.empty() || job.params.top_logprobs >= 0) job.publish(text, job.generated_, nullptr);
}

void Scheduler::loop() {
  std::vector<std::shared_ptr<Job>> running;  // admission order
  std::vector<StepInput> batch;
  std::vector<Job*> owners;                   // owners[i] fed batch[i]
  for (;;) {
    const bool go_on = admit(running);
    for (auto& job : running) {
      if (!go_on || job->cancelled()) {
        finish(*job, "cancelled");
        job.reset();
      } else if (job->stop_requested() && job->started_) {
        finish(*job, "stop");
        job.reset();
      } else if (!job->started_ && !job->follower_) {
        // An engine failure here (out of memory for a fork) ends this job
        // with a 500, not the scheduler thread.
        try {
          start(*job);
        } catch (const std::exception& e) {
          finish(*job, "error", e.what());
          job.reset();
        }
      }
    }
    std::erase(running, nullptr);
    std::erase_if(running, [](const auto& j) { return j->ended_; });
    if (!go_on) {
      clear_cache();
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      stats_.running = int64_t(running.size());
    }
    if (running.empty()) continue;

    // Decode tokens first (one each), then prompt chunks under the budget.
    batch.clear();
    owners.clear();
    int64_t budget = engine_.step_token_budget();
    int64_t prompt_fed = 0;
    // Speculation: drafts for every decoding job first, in one draft round.
    SpecDecodeStats spec;
    if (draft_tokens_ > 0) {
      std::vector<DraftInput> drafts;
      std::vector<Job*> drafting;
      const int64_t ctx = engine_.max_context();
      // Drafts share the step's token budget after one token per decoding job.
      int64_t room = budget;
      for (auto& job : running)
        if (job->started_ && job->fed_ == job->params.prompt.size()) --room;
      for (auto& job : running) {
        if (!job->started_ || job->fed_ < job->params.prompt.size()) continue;
        job->feed_.assign(1, job->next_token_);
        // Every emitted token needs budget, every fed one context (as generate()).
        const int64_t k = std::min({draft_tokens_, job->params.max_tokens - job->generated_ - 1,
                                    ctx - engine_.position(job->seq_) - 1, room});
        if (k <= 0) continue;
        room -= k;
        drafts.push_back({job->seq_, job->next_token_, k, job->params.sampling});
        drafting.push_back(job.get());
      }
      if (!drafts.empty()) {
        try {
          const auto got = engine_.draft(drafts, &spec);
          for (size_t i = 0; i < got.size(); ++i)
            drafting[i]->feed_.insert(drafting[i]->feed_.end(), got[i].begin(), got[i].end());
        } catch (const std::exception& e) {
          for (Job* job : drafting) finish(*job, "error", e.what());
        }
      }
    }
    for (auto& job : running) {
      if (!job->started_ || job->ended_ || job->fed_ < job->params.prompt.size()) continue;
      StepInput in{job->seq_, std::span<const int32_t>(&job->next_token_, 1)};
      if (draft_tokens_ > 0 && job->feed_.size() > 1) {
        in.tokens = job->feed_;
        in.all_logits = true;  // each row verifies the draft after it
      }
      batch.push_back(in);
      owners.push_back(job.get());
      budget -= int64_t(in.tokens.size());
    }
    for (auto& job : running) {
      if (!job->started_) continue;  // a choice waiting for its group's prefill
      const size_t left = job->params.prompt.size() - job->fed_;
      if (left == 0) continue;
      if (budget <= 0) break;
      const size_t n = std::min(left, size_t(budget));
      StepInput in{job->seq_, std::span<const int32_t>(job->params.prompt).subspan(job->fed_, n)};
      in.want_logits = n == left;  // only the prompt's last token samples
      batch.push_back(in);
      owners.push_back(job.get());
      budget -= int64_t(n);
      prompt_fed += int64_t(n);
    }

    // Decode steps without log-probabilities draw their token in the step:
    // on a GPU only the id crosses to the host (StepInput::sample).
    std::vector<int32_t> drawn(batch.size(), -1);
    for (size_t i = 0; i < batch.size(); ++i) {
      const Job& job = *owners[i];
      if (job.fed_ < job.params.prompt.size() || batch[i].all_logits || job.params.top_logprobs >= 0) continue;
      batch[i].sample = &job.params.sampling;
      batch[i].token = &drawn[i];
    }
    std::vector<std::vector<float>> logits;
    try {
      logits = engine_.step(batch);
    } catch (const std::exception& e) {
      // Requests are checked before they are queued, so this is the
      // engine's failure, not a client's: end the step's jobs with it.
      for (Job* job : owners) finish(*job, "error", e.what());
      std::erase_if(running, [](const auto& j) { return j->ended_; });
      continue;
    }
    // Verify steps first: their counts join the metrics before any token of
    // this step is handed out, so a client that reads /metrics right after
    // its reply sees its drafts and their acceptance together.
    std::vector<std::vector<int32_t>> verified(batch.size());
    for (size_t i = 0; i < batch.size(); ++i) {
      if (!batch[i].all_logits || logits[i].empty()) continue;
      Job& job = *owners[i];
      try {
        verified[i] = engine_.accept_drafts(job.seq_, logits[i].data(), job.params.sampling, &spec);
      } catch (const std::exception& e) {
        finish(job, "error", e.what());
      }
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      stats_.spec.add(spec);
    }
    int64_t sampled = 0;
    for (size_t i = 0; i < batch.size(); ++i) {
      Job& job = *owners[i];
      try {
        if (job.fed_ < job.params.prompt.size()) {
          job.fed_ += batch[i].tokens.size();
          if (job.fed_ == job.params.prompt.size()) {
            remember_prompt(job);
            fork_followers(job);
            // The other choices sample from the same prompt logits.
            for (auto& f : job.followers_) {
              if (f->ended_ || f->generated_ > 0) continue;
              try {
                const int32_t t = engine_.sample(f->seq_, logits[i].data(), f->params.sampling);
                ++sampled;
                on_token(*f, t, logits[i].data());
              } catch (const std::exception& e) {
                finish(*f, "error", e.what());
              }
            }
          }
        }
        if (batch[i].token) {
          ++sampled;
          on_token(job, drawn[i], nullptr);  // no log-probabilities wanted
          continue;
        }
        if (logits[i].empty()) continue;
        if (batch[i].all_logits) {
          // A verify step: the accepted drafts and the model's own token,
          // each with the logits row it was drawn from.
          const std::vector<int32_t>& emitted = verified[i];
          const int64_t V = engine_.vocab_size();
          for (size_t j = 0; j < emitted.size() && !job.ended_; ++j) {
            ++sampled;
            on_token(job, emitted[j], logits[i].data() + int64_t(j) * V);
          }
          continue;
        }
        const int32_t token = engine_.sample(job.seq_, logits[i].data(), job.params.sampling);
        ++sampled;
        on_token(job, token, logits[i].data());
      } catch (const std::exception& e) {
        finish(job, "error", e.what());
      }
    }
    std::erase_if(running, [](const auto& j) { return j->ended_; });
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.steps;
    stats_.prompt_tokens += prompt_fed;
    stats_.generated_tokens += sampled;
    stats_.running = int64_t(running.size());
  }
}

}  // namespace nibble::server
