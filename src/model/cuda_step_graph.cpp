#include "model/cuda_step_graph.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "device/cuda_graph.h"
#include "util/error.h"

namespace nibble {

void CudaGraphDriver::begin_capture() { cuda_capture_begin(stream_); }
void* CudaGraphDriver::end_capture() { return cuda_capture_end(stream_); }
size_t CudaGraphDriver::nodes(void* graph) { return cuda_graph_nodes(graph); }
void* CudaGraphDriver::instantiate(void* graph) { return cuda_graph_instantiate(graph); }
bool CudaGraphDriver::update(void* exec, void* graph) { return cuda_graph_update(exec, graph); }
void CudaGraphDriver::launch(void* exec) { cuda_graph_launch(exec, stream_); }
void CudaGraphDriver::destroy_graph(void* graph) { cuda_graph_destroy(graph); }
void CudaGraphDriver::destroy_exec(void* exec) { cuda_graph_exec_destroy(exec); }

namespace {

// The key's starting value and mixing step (splitmix64's finaliser over the
// running key and the value): keys of different operation sequences differ
// with overwhelming likelihood, and a collision only costs a refused update.
constexpr uint64_t kKeySeed = 0x6e6962626c650001ull;

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

uint64_t mix64(uint64_t h, uint64_t v) {
  uint64_t z = h ^ (v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

std::string describe(const StepGraphStats& s) {
  if (s.launches == 0) return "no step ran as a CUDA graph";
  const double per = 1e3 / double(s.launches);
  char line[320];
  std::snprintf(line, sizeof line,
                "%lld graph launches (%lld ended early), %lld instantiations, %lld updates (%lld refused), last graph "
                "%lld nodes; host ms per launch: capture %.3f, update/instantiate %.3f, launch %.3f",
                (long long)s.launches, (long long)s.early_ends, (long long)s.instantiations, (long long)s.updates,
                (long long)s.refused_updates, (long long)s.nodes, s.capture_seconds * per, s.build_seconds * per,
                s.launch_seconds * per);
  return line;
}

StepGraphs::StepGraphs(GraphDriver& driver, size_t capacity) : d_(&driver), capacity_(std::max<size_t>(1, capacity)) {}

StepGraphs::~StepGraphs() {
  // A capture left open holds work that never ran; its owner ends it
  // (CudaBackend's destructor) before this.
  for (const Exec& e : execs_) d_->destroy_exec(e.exec);
}

void StepGraphs::begin() {
  if (capturing_) end(false);
  began_ = now_seconds();
  d_->begin_capture();
  capturing_ = true;
  key_ = kKeySeed;
  ++step_;
}

void StepGraphs::mix(uint64_t v) {
  if (capturing_) key_ = mix64(key_, v);
}

void StepGraphs::end(bool early) {
  if (!capturing_) return;
  capturing_ = false;
  void* graph = d_->end_capture();  // throws when the capture was invalidated
  if (!graph) return;
  const double captured = now_seconds();
  stats_.capture_seconds += captured - began_;
  ++stats_.captures;
  if (early) ++stats_.early_ends;
  void* exec = nullptr;
  bool kept = true;
  try {
    stats_.nodes = int64_t(d_->nodes(graph));
    exec = executable_for(graph, early, kept);
  } catch (...) {
    d_->destroy_graph(graph);
    throw;
  }
  d_->destroy_graph(graph);  // the executable keeps what it needs
  const double built = now_seconds();
  stats_.build_seconds += built - captured;
  try {
    d_->launch(exec);
  } catch (...) {
    if (!kept) d_->destroy_exec(exec);
    throw;
  }
  // A one-off is freed once it has run (the runtime defers the free of an
  // executable in flight).
  if (!kept) d_->destroy_exec(exec);
  stats_.launch_seconds += now_seconds() - built;
  ++stats_.launches;
}

void StepGraphs::end_quietly(bool early) noexcept {
  try {
    end(early);
  } catch (const std::exception& e) {
    if (lost_.empty()) lost_ = e.what();
  }
}

void StepGraphs::raise_lost() {
  if (lost_.empty()) return;
  const std::string e = std::move(lost_);
  lost_.clear();
  fail(e);
}

void* StepGraphs::executable_for(void* graph, bool early, bool& kept) {
  kept = true;
  auto it = std::find_if(execs_.begin(), execs_.end(), [&](const Exec& e) { return e.key == key_; });
  if (it != execs_.end()) {
    it->used = step_;
    if (d_->update(it->exec, graph)) {
      ++stats_.updates;
      return it->exec;
    }
    ++stats_.refused_updates;
    // Another topology under this key: this graph's executable replaces it.
    void* fresh = d_->instantiate(graph);
    ++stats_.instantiations;
    d_->destroy_exec(it->exec);
    it->exec = fresh;
    return fresh;
  }
  void* fresh = d_->instantiate(graph);
  ++stats_.instantiations;
  // The part of a step before an early end (a growth, a first use) seldom
  // comes again: run once, not kept where it would push out a real step's.
  if (early) {
    kept = false;
    return fresh;
  }
  if (execs_.size() == capacity_) {
    auto lru = std::min_element(execs_.begin(), execs_.end(), [](const Exec& a, const Exec& b) { return a.used < b.used; });
    d_->destroy_exec(lru->exec);
    execs_.erase(lru);
  }
  execs_.push_back(Exec{key_, fresh, step_});
  return fresh;
}

}  // namespace nibble
