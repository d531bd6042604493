// Continuous batching over Engine::step. One scheduler thread owns every
// step() call; HTTP threads only submit jobs and read their output, so a
// slow or vanished client never holds up the batch.
//
// Each step takes, in this order:
//  1. the next decode token of every running job (one token each);
//  2. prefill chunks of the jobs still reading their prompt, in arrival
//     order, while the step has room under Engine::step_token_budget().
// So a new request joins the running batch at the next step, and a long
// prompt is spread over several steps instead of stalling running streams
// for its whole prefill. At most `parallel` jobs hold a sequence; at most
// `max_queue` more wait for one (then submit() refuses with 503).
//
// Sampling is per job (Engine::sample on its own sequence, seeded by the
// request), so a job's tokens do not depend on what else is running; with
// step()'s bit-identical logits a greedy reply is the same alone or batched.
//
// Prefix reuse: when a job's prompt is fully fed, a fork of its sequence is
// kept, and when it finishes (stop / length) its sequence itself, prompt and
// reply (LRU, at most `cache_tokens` tokens over all entries). A later job
// starts from the kept state sharing the longest prefix with its prompt (the
// next chat turn: the previous prompt and reply; a shared system prompt) and
// prefills only the rest; a state that goes past the shared prefix is
// truncated back to it when that is within the rollback reach. Forked and
// truncated states continue bit-identically to a fresh prefill
// (docs/sequences.md).
//
// n > 1 (several choices for one prompt): the request is a group of jobs.
// The first prefills the prompt; when its last prompt token's logits come,
// each other job forks that state and samples from the same logits with its
// own seed (the request's seed + its index). One prefill, n sequences. A
// group is admitted whole, so it never waits half-started.
//
// Log-probabilities, when asked for, are the log-softmax of the raw logits
// (before temperature and truncation, as OpenAI reports them), for the
// sampled token and the most likely ones.
//
// Speculative decoding (draft_tokens > 0, docs/speculative.md "In serve"):
// every sequence keeps what the model's MTP layer reads; each step first
// drafts up to k tokens for every decoding job (Engine::draft: one draft
// forward per draft position over all of them), then feeds each job
// [last, d_1 .. d_k] with all logits in the same step as everything else,
// and Engine::accept_drafts takes the agreeing prefix plus the model's own
// token (rejection sampling with the job's sampler; greedy: exactly plain
// decoding's tokens). A job emits 1 .. k + 1 tokens per step.
//
// Latency metrics: time to first token (from submit), time between tokens,
// time per output token (a request's mean) and end-to-end time, kept as
// Prometheus histograms.
//
// A job ends at a model end-of-sequence token (finish "stop"), a stop
// string ("stop"), its token budget or the context's end ("length"),
// cancel() (a client gone: at the next step), or shutdown(). Its sequence is
// released at once.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "nibble/engine.h"
#include "server/histogram.h"
#include "server/text_stream.h"

namespace nibble::server {

struct JobParams {
  std::vector<int32_t> prompt;         // fed from position 0; not empty
  int64_t max_tokens = 16;             // already capped to the context
  SamplingParams sampling;
  std::vector<std::string> stop;       // stop strings
  std::vector<int32_t> stop_tokens;    // ids that end the reply besides the model's end-of-sequence ids
  int64_t top_logprobs = -1;           // >= 0: log-probabilities of the sampled and this many top tokens
};

// One generated token's log-probability, and the top candidates' (most
// likely first; ties: lower id first).
struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;
};

// What an HTTP thread reads of a job.
struct JobUpdate {
  std::string text;                    // new text since the last update
  std::vector<TokenLogprob> logprobs;  // of the tokens since the last update (end-of-sequence excluded)
  int64_t completion_tokens = 0;       // generated so far
  bool done = false;
  std::string finish_reason;           // when done: "stop", "length", "cancelled" or "error"
  std::string error;                   // finish "error": why
};

// One request's generation. Shared by the scheduler thread (which writes
// output under `mu_`) and the HTTP thread (which reads it, or cancels).
class Job {
 public:
  explicit Job(JobParams params) : params(std::move(params)) {}

  // Waits up to `timeout` for new output; false when nothing came.
  bool wait(JobUpdate& out, std::chrono::milliseconds timeout);
  // Waits up to `timeout` for the end only (no wake-up per token: a
  // non-streamed reply), then takes whatever came; false when nothing did.
  bool wait_end(JobUpdate& out, std::chrono::milliseconds timeout);
  // Ends the job at the scheduler's next step (idempotent, any thread).
  void cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }
  // Ends it there as a normal finish ("stop"): the reader has all it can use.
  void stop() { stop_requested_.store(true); }
  bool stop_requested() const { return stop_requested_.load(); }
  // Prompt tokens taken from the prefix cache (set when the job starts).
  int64_t cached_tokens() const { return cached_tokens_.load(); }

  const JobParams params;
  const std::chrono::steady_clock::time_point submitted = std::chrono::steady_clock::now();

 private:
  friend class Scheduler;
  void take(JobUpdate& out);  // under mu_
  void publish(const std::string& text, int64_t tokens, const char* finish, const std::string& error = "");

  std::mutex mu_;
  std::condition_variable cv_;
  std::string pending_;                // text not yet read by wait()
  std::vector<TokenLogprob> pending_logprobs_;
  int64_t tokens_ = 0;
  bool done_ = false, done_read_ = false, news_ = false;
  bool end_only_ = false;              // the reader waits in wait_end()
  std::string finish_, error_;
  std::atomic<bool> cancelled_{false}, stop_requested_{false};
  std::atomic<int64_t> cached_tokens_{0};

  // The scheduler thread's own fields (never touched by HTTP threads).
  SeqId seq_ = -1;
  bool started_ = false, ended_ = false;
  std::vector<std::shared_ptr<Job>> followers_;  // n > 1: the other choices (on the first job)
  bool follower_ = false;              // forks the first job's state when its prompt is fed
  size_t fed_ = 0;                     // prompt tokens fed
  int32_t next_token_ = 0;             // sampled, to be fed by the next decode step
  std::vector<int32_t> feed_;          // speculation: [next_token_, drafts...] of this step
  int64_t generated_ = 0;
  std::chrono::steady_clock::time_point first_token_, last_token_;
  std::unique_ptr<TextStream> text_;
};

struct SchedulerStats {
  int64_t running = 0, waiting = 0;
  int64_t steps = 0;
  int64_t prompt_tokens = 0, generated_tokens = 0;  // processed since start
  int64_t finished = 0, cancelled = 0;
  int64_t cache_hits = 0, cache_entries = 0, cache_tokens = 0;
  Histogram ttft{Histogram::ttft_bounds()};           // submit to first token
  Histogram itl{Histogram::tpot_bounds()};            // between consecutive tokens
  Histogram tpot{Histogram::tpot_bounds()};           // a finished request's mean time per token after the first
  Histogram e2e{Histogram::e2e_bounds()};             // submit to the end (stop / length)
  int64_t draft_tokens = 0;                           // speculation's k; 0 = off
  SpecDecodeStats spec;                               // its verify steps, drafts and acceptances so far
};

class Scheduler {
 public:
  // draft_tokens > 0: speculative decoding with that many drafts per step
  // (the engine's model must have a draft layer: throws naming why).
  Scheduler(Engine& engine, int parallel, int max_queue, int64_t cache_tokens, int64_t draft_tokens = 0);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a job. Throws ApiError 503 when the queue is full or the server
  // is shutting down.
  std::shared_ptr<Job> submit(JobParams params);
  // n choices of one prompt (one prefill): job i samples with seed + i.
  // Throws ApiError 400 when n exceeds the parallel slots, 503 as submit().
  std::vector<std::shared_ptr<Job>> submit(JobParams params, int64_t n);
  // Cancels everything (running and waiting) and joins the thread.
  void shutdown();
  SchedulerStats stats() const;

 private:
  void loop();
  bool admit(std::vector<std::shared_ptr<Job>>& running);  // false: shut down
  void start(Job& job);
  void finish(Job& job, const char* reason, const std::string& error = "");
  // `logits`: the row the token was drawn from, for log-probabilities; null
  // when the step drew it on the backend (the job wants none).
  void on_token(Job& job, int32_t token, const float* logits);
  void fork_followers(Job& leader);
  void remember_prompt(const Job& job);
  bool cacheable(const std::vector<int32_t>& tokens) const;
  bool remember(SeqId seq);
  void clear_cache();

  // A state kept for reuse (a fed prompt, or a finished reply with its
  // prompt); the list is most recently used first.
  struct CachedPrompt {
    std::vector<int32_t> tokens;       // what the state has fed
    SeqId seq = -1;
  };

  Engine& engine_;
  const size_t parallel_, max_queue_;
  const int64_t cache_limit_;           // prompt tokens over all entries; 0 = off
  const int64_t draft_tokens_;          // speculation's k; 0 = off
  static constexpr size_t kMaxCacheEntries = 64;
  std::list<CachedPrompt> cache_;       // scheduler thread only
  int64_t cache_held_ = 0;
  std::vector<int64_t> eos_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> waiting_;
  bool stopping_ = false;
  SchedulerStats stats_;

  std::thread thread_;
};

}  // namespace nibble::server
