#include "server/scheduler.h"

#include <algorithm>
#include <exception>

#include "server/api_error.h"

namespace nibble::server {

// ---- Job: the hand-over between the scheduler and an HTTP thread ----------

bool Job::wait(JobUpdate& out, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return news_ || (done_ && !done_read_); })) return false;
  out.text = std::move(pending_);
  pending_.clear();
  out.completion_tokens = tokens_;
  out.done = done_;
  out.finish_reason = finish_;
  out.error = error_;
  news_ = false;
  if (done_) done_read_ = true;
  return true;
}

void Job::publish(const std::string& text, int64_t tokens, const char* finish, const std::string& error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_ += text;
    tokens_ = tokens;
    if (finish) {
      done_ = true;
      finish_ = finish;
      error_ = error;
    }
    news_ = true;
  }
  cv_.notify_all();
}

// ---- Scheduler --------------------------------------------------------------

Scheduler::Scheduler(Engine& engine, int parallel, int max_queue, int64_t cache_tokens)
    : engine_(engine), parallel_(size_t(std::max(1, parallel))), max_queue_(size_t(std::max(0, max_queue))),
      cache_limit_(std::max<int64_t>(0, cache_tokens)), eos_(engine.eos_token_ids()) {
  thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() { shutdown(); }

std::shared_ptr<Job> Scheduler::submit(JobParams params) {
  auto job = std::make_shared<Job>(std::move(params));
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
  return job;
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
    while (running.size() < parallel_ && !waiting_.empty()) {
      running.push_back(waiting_.front());
      waiting_.pop_front();
    }
    stats_.waiting = int64_t(waiting_.size());
  }
  for (auto& job : dropped) finish(*job, "cancelled");
  return !stop;
}

void Scheduler::start(Job& job) {
  // The longest kept prompt that is a proper prefix of this one (one token
  // at least must still be fed, for the logits to sample from).
  const auto& prompt = job.params.prompt;
  auto best = cache_.end();
  for (auto it = cache_.begin(); it != cache_.end(); ++it) {
    if (it->tokens.size() < prompt.size() && (best == cache_.end() || it->tokens.size() > best->tokens.size()) &&
        std::equal(it->tokens.begin(), it->tokens.end(), prompt.begin()))
      best = it;
  }
  if (best != cache_.end()) {
    cache_.splice(cache_.begin(), cache_, best);
    job.seq_ = engine_.fork(best->seq);
    job.fed_ = best->tokens.size();
    job.cached_tokens_.store(int64_t(job.fed_));
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.cache_hits;
  } else {
    job.seq_ = engine_.create();
  }
  job.text_ = std::make_unique<TextStream>(
      [this](std::span<const int32_t> ids) { return engine_.detokenize(ids); }, job.params.stop);
}

void Scheduler::finish(Job& job, const char* reason, const std::string& error) {
  if (job.seq_ >= 0) {
    engine_.release(job.seq_);
    job.seq_ = -1;
  }
  // What was held back (a possible stop-string start) is sent, unless a
  // stop string or the client ended the job.
  const bool keep = std::string(reason) == "stop" || std::string(reason) == "length";
  const std::string rest = keep && job.text_ ? job.text_->flush() : "";
  job.publish(rest, job.generated_, reason, error);
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.finished;
  if (std::string(reason) == "cancelled") ++stats_.cancelled;
}

// Keeps a fork of a job whose prompt was just fed, evicting the least
// recently used entries past the bound.
void Scheduler::remember_prompt(const Job& job) {
  const auto& prompt = job.params.prompt;
  if (cache_limit_ == 0 || int64_t(prompt.size()) > cache_limit_) return;
  for (auto it = cache_.begin(); it != cache_.end(); ++it) {
    if (it->tokens == prompt) {
      cache_.splice(cache_.begin(), cache_, it);
      return;
    }
  }
  cache_.push_front({prompt, engine_.fork(job.seq_)});
  cache_held_ += int64_t(prompt.size());
  while (cache_held_ > cache_limit_ || cache_.size() > kMaxCacheEntries) {
    cache_held_ -= int64_t(cache_.back().tokens.size());
    engine_.release(cache_.back().seq);
    cache_.pop_back();
  }
  std::lock_guard<std::mutex> lock(mu_);
  stats_.cache_entries = int64_t(cache_.size());
  stats_.cache_tokens = cache_held_;
}

void Scheduler::clear_cache() {
  for (auto& c : cache_) engine_.release(c.seq);
  cache_.clear();
  cache_held_ = 0;
}

// One sampled token: send its text, or end the job.
void Scheduler::on_token(Job& job, int32_t token) {
  ++job.generated_;
  if (std::find(eos_.begin(), eos_.end(), int64_t(token)) != eos_.end()) return finish(job, "stop");
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
  if (!text.empty()) job.publish(text, job.generated_, nullptr);
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
      } else if (job->seq_ < 0) {
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
    for (auto& job : running) {
      if (job->fed_ < job->params.prompt.size()) continue;
      batch.push_back({job->seq_, std::span<const int32_t>(&job->next_token_, 1)});
      owners.push_back(job.get());
      --budget;
    }
    for (auto& job : running) {
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

    std::vector<std::vector<float>> logits;
    try {
      logits = engine_.step(batch);
    } catch (const std::exception& e) {
      // Requests are checked before they are queued, so this is the
      // engine's failure, not a client's: end the step's jobs with it.
      for (Job* job : owners) finish(*job, "error", e.what());
      std::erase_if(running, [](const auto& j) { return j->seq_ < 0; });
      continue;
    }
    int64_t sampled = 0;
    for (size_t i = 0; i < batch.size(); ++i) {
      Job& job = *owners[i];
      try {
        if (job.fed_ < job.params.prompt.size()) {
          job.fed_ += batch[i].tokens.size();
          if (job.fed_ == job.params.prompt.size()) remember_prompt(job);
        }
        if (logits[i].empty()) continue;
        const int32_t token = engine_.sample(job.seq_, logits[i].data(), job.params.sampling);
        ++sampled;
        on_token(job, token);
      } catch (const std::exception& e) {
        finish(job, "error", e.what());
      }
    }
    std::erase_if(running, [](const auto& j) { return j->seq_ < 0; });
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.steps;
    stats_.prompt_tokens += prompt_fed;
    stats_.generated_tokens += sampled;
    stats_.running = int64_t(running.size());
  }
}

}  // namespace nibble::server
