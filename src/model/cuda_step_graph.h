// Decode steps as CUDA graphs (issue 16): the CUDA backend captures a step's
// launches on its stream instead of running them one by one, and at the
// step's end (the download of its ids or logits) launches them as one
// graph. The GPU then runs the step's thousands of small kernels back to
// back, without a launch's gap between them, and the host's work per kernel
// is a capture's record rather than a launch.
//
// A step captured again gives a graph of the same topology with new
// parameters (positions, counts, addresses in the staging memory); an
// executable graph made once takes them by an update (cudaGraphExecUpdate,
// cheap) instead of an instantiation (expensive). Steps differ in topology
// (how many sequences, which branches the host took), so executables are
// kept per step key: a hash of the step's operations and branches the
// backend mixes in as it launches. A key is a hint, not a proof: an update
// the runtime refuses instantiates afresh, so a key that misses a branch
// costs time, never correctness.
//
// Anything a capture cannot hold (a host synchronisation, a free, an upload
// from pageable memory: first uses and growths) ends the capture first:
// the work captured so far runs as a graph, in order, and the rest of the
// step runs eagerly. Host logic over a GraphDriver, so that it is tested on
// the CPU (a fake); CudaGraphDriver is the runtime's (device/cuda_graph.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace nibble {

class GraphDriver {
 public:
  virtual ~GraphDriver() = default;
  virtual void begin_capture() = 0;
  virtual void* end_capture() = 0;  // the graph, or null when nothing was queued; throws when invalidated
  virtual size_t nodes(void* graph) = 0;
  virtual void* instantiate(void* graph) = 0;
  virtual bool update(void* exec, void* graph) = 0;  // false: another topology, exec unchanged
  virtual void launch(void* exec) = 0;
  virtual void destroy_graph(void* graph) = 0;
  virtual void destroy_exec(void* exec) = 0;
};

// The runtime's graph calls on one stream.
class CudaGraphDriver : public GraphDriver {
 public:
  explicit CudaGraphDriver(void* stream) : stream_(stream) {}
  void begin_capture() override;
  void* end_capture() override;
  size_t nodes(void* graph) override;
  void* instantiate(void* graph) override;
  bool update(void* exec, void* graph) override;
  void launch(void* exec) override;
  void destroy_graph(void* graph) override;
  void destroy_exec(void* exec) override;

 private:
  void* stream_;
};

struct StepGraphStats {
  int64_t captures = 0;         // steps (or parts of steps) captured
  int64_t launches = 0;         // graphs launched
  int64_t instantiations = 0;   // executables made (a new key, or an update refused)
  int64_t updates = 0;          // executables reused with a step's new parameters
  int64_t refused_updates = 0;  // updates the runtime refused (a key that missed a branch)
  int64_t early_ends = 0;       // captures ended inside a step (a synchronisation, a free, a first use)
  int64_t nodes = 0;            // nodes of the last graph launched
  // Host seconds, summed over the captures: recording the step's launches
  // (from begin() to the capture's end: the forward's host work), making
  // the executable (update or instantiation), launching it. With the GPU's
  // time per step (bench decode) they split a step into host and device.
  double capture_seconds = 0, build_seconds = 0, launch_seconds = 0;
};

// One line for people: the counts and the host time per launch.
std::string describe(const StepGraphStats& s);

class StepGraphs {
 public:
  // Keeps at most `capacity` executables, the least recently used dropped.
  explicit StepGraphs(GraphDriver& driver, size_t capacity = 32);
  ~StepGraphs();
  StepGraphs(const StepGraphs&) = delete;
  StepGraphs& operator=(const StepGraphs&) = delete;

  // Starts capturing a step (one left open is ended and launched first).
  void begin();
  bool capturing() const { return capturing_; }
  // Mixes a value into the key of the step being captured (the backend's
  // operations, their row counts, the branches they took).
  void mix(uint64_t v);
  // Ends the capture, if one is open, and launches what it holds: by an
  // update of the executable of the step's key, or a new one. `early`: the
  // step goes on eagerly (counted in stats().early_ends). Throws when the
  // capture was invalidated: its work never ran.
  void end(bool early);
  // end() for callers that must not throw (a free in a destructor): the
  // error is kept for raise_lost().
  void end_quietly(bool early) noexcept;
  // Throws (once) the error end_quietly kept, if any: the step's results
  // are not to be trusted.
  void raise_lost();

  const StepGraphStats& stats() const { return stats_; }
  size_t executables() const { return execs_.size(); }

 private:
  struct Exec {
    uint64_t key = 0;
    void* exec = nullptr;
    uint64_t used = 0;  // the step that last launched it
  };
  // The executable to launch for `graph` under the current key; kept:
  // whether it stays in execs_ (false: the caller frees it after launch).
  void* executable_for(void* graph, bool early, bool& kept);

  GraphDriver* d_;
  size_t capacity_;
  std::vector<Exec> execs_;
  bool capturing_ = false;
  double began_ = 0;  // steady-clock seconds at begin()
  uint64_t key_ = 0;
  uint64_t step_ = 0;
  std::string lost_;  // the error end_quietly kept, not yet raised
  StepGraphStats stats_;
};

}  // namespace nibble
