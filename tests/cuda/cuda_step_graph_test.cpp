// The step graphs' host logic (model/cuda_step_graph.h) on the CPU, over a
// fake driver that models a stream: work queued while capturing goes into
// the graph, otherwise it runs at once; an executable graph holds its
// graph's operations, an update succeeds only for the same operation kinds
// (a topology) and takes the new parameters; a launch runs them. The tests
// check what ran, in which order, with which parameters, against the order
// the work was queued in: the contract that makes graphs invisible to the
// forward.
#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "model/cuda_step_graph.h"
#include "util/error.h"

namespace nibble {
namespace {

struct Work {
  std::string kind;  // a kernel's name: the topology
  int param = 0;     // its arguments: what an update may change
  bool operator==(const Work&) const = default;
};

struct FakeGraph {
  std::vector<Work> work;
};

class FakeDriver : public GraphDriver {
 public:
  // The stream: captured while a capture is open, else run now.
  void queue(const std::string& kind, int param) {
    if (capturing_) {
      if (invalidate_next_) invalidated_ = true;
      current_.work.push_back(Work{kind, param});
    } else {
      ran.push_back(Work{kind, param});
    }
  }

  void begin_capture() override {
    if (capturing_) fail("fake: capture begun twice");
    capturing_ = true;
    current_ = {};
    invalidated_ = false;
  }
  void* end_capture() override {
    if (!capturing_) fail("fake: no capture to end");
    capturing_ = false;
    if (invalidated_) {
      invalidate_next_ = false;
      fail("fake: capture invalidated");
    }
    if (current_.work.empty()) return nullptr;
    auto* g = new FakeGraph(current_);
    graphs.insert(g);
    return g;
  }
  size_t nodes(void* graph) override { return as_graph(graph)->work.size(); }
  void* instantiate(void* graph) override {
    ++instantiations;
    auto* x = new FakeGraph(*as_graph(graph));
    execs.insert(x);
    return x;
  }
  bool update(void* exec, void* graph) override {
    FakeGraph* x = as_exec(exec);
    const FakeGraph* g = as_graph(graph);
    if (x->work.size() != g->work.size()) return false;
    for (size_t i = 0; i < g->work.size(); ++i)
      if (x->work[i].kind != g->work[i].kind) return false;
    x->work = g->work;
    return true;
  }
  void launch(void* exec) override {
    for (const Work& w : as_exec(exec)->work) ran.push_back(w);
  }
  void destroy_graph(void* graph) override {
    if (!graph) return;
    FakeGraph* g = as_graph(graph);
    graphs.erase(g);
    delete g;
  }
  void destroy_exec(void* exec) override {
    if (!exec) return;
    FakeGraph* x = as_exec(exec);
    execs.erase(x);
    delete x;
  }

  std::vector<Work> ran;
  std::set<FakeGraph*> graphs, execs;  // alive
  int instantiations = 0;
  bool invalidate_next_ = false;  // the next capture's work breaks it

 private:
  FakeGraph* as_graph(void* g) {
    auto* p = static_cast<FakeGraph*>(g);
    if (!graphs.count(p)) ADD_FAILURE() << "fake: not a live graph";
    return p;
  }
  FakeGraph* as_exec(void* x) {
    auto* p = static_cast<FakeGraph*>(x);
    if (!execs.count(p)) ADD_FAILURE() << "fake: not a live executable";
    return p;
  }
  bool capturing_ = false, invalidated_ = false;
  FakeGraph current_;
};

// A decode step as the backend runs it: the key mixed as it launches, the
// kernels queued, the step's end. `pool` adds a branch.
void step(StepGraphs& g, FakeDriver& d, int position, bool pool, std::vector<Work>& want) {
  g.begin();
  auto launch = [&](const std::string& kind, int param) {
    g.mix(std::hash<std::string>{}(kind));
    d.queue(kind, param);
    want.push_back(Work{kind, param});
  };
  launch("embed", position);
  launch("attend", position);
  if (pool) launch("pool", position / 4);
  launch("head", position);
  g.end(false);
}

TEST(StepGraphs, RepeatedStepsUpdateOneExecutableAndRunWhatWasQueued) {
  FakeDriver d;
  std::vector<Work> want;
  {
    StepGraphs g(d);
    for (int p = 10; p < 20; ++p) step(g, d, p, false, want);
    EXPECT_EQ(d.ran, want);  // every step's own positions, in order
    EXPECT_EQ(g.stats().captures, 10);
    EXPECT_EQ(g.stats().launches, 10);
    EXPECT_EQ(g.stats().instantiations, 1);
    EXPECT_EQ(g.stats().updates, 9);
    EXPECT_EQ(g.stats().nodes, 3);
    EXPECT_EQ(g.executables(), 1u);
    EXPECT_TRUE(d.graphs.empty());  // each captured graph freed once launched
    EXPECT_GE(g.stats().capture_seconds, 0);
    EXPECT_GE(g.stats().build_seconds, 0);
    EXPECT_GE(g.stats().launch_seconds, 0);
    const std::string line = describe(g.stats());
    EXPECT_NE(line.find("10 graph launches (0 ended early), 1 instantiations, 9 updates"), std::string::npos) << line;
  }
  EXPECT_TRUE(d.execs.empty());  // and the executables with the StepGraphs
}

TEST(StepGraphs, EachTopologyKeepsItsOwnExecutable) {
  FakeDriver d;
  std::vector<Work> want;
  StepGraphs g(d);
  for (int p = 0; p < 16; ++p) step(g, d, p, p % 4 == 3, want);
  EXPECT_EQ(d.ran, want);
  // Two keys (with and without the pool), each instantiated once.
  EXPECT_EQ(g.stats().instantiations, 2);
  EXPECT_EQ(g.stats().updates, 14);
  EXPECT_EQ(g.stats().refused_updates, 0);
  EXPECT_EQ(g.executables(), 2u);
}

TEST(StepGraphs, AKeyThatMissesABranchCostsAnInstantiationNotCorrectness) {
  FakeDriver d;
  std::vector<Work> want;
  StepGraphs g(d);
  for (int p = 0; p < 6; ++p) {
    // The branch's kernel queued without mixing it into the key.
    g.begin();
    d.queue("embed", p);
    want.push_back(Work{"embed", p});
    if (p % 2) {
      d.queue("pool", p);
      want.push_back(Work{"pool", p});
    }
    g.end(false);
  }
  EXPECT_EQ(d.ran, want);
  EXPECT_EQ(g.stats().refused_updates, 5);  // every step after the first changed topology
  EXPECT_EQ(g.stats().instantiations, 6);
  EXPECT_EQ(g.executables(), 1u);  // replaced, not piled up
  EXPECT_EQ(d.execs.size(), 1u);
}

TEST(StepGraphs, AnEarlyEndRunsTheCapturedPartThenTheRestEagerlyInOrder) {
  FakeDriver d;
  StepGraphs g(d);
  g.begin();
  d.queue("a", 1);
  d.queue("b", 2);
  g.end(true);  // a free, an allocation: what a graph cannot hold
  EXPECT_FALSE(g.capturing());
  d.queue("c", 3);  // eager from here
  g.end(false);     // the step's download: nothing left to end
  EXPECT_EQ(d.ran, (std::vector<Work>{{"a", 1}, {"b", 2}, {"c", 3}}));
  EXPECT_EQ(g.stats().early_ends, 1);
  EXPECT_EQ(g.stats().launches, 1);
  // A part ended early is run once and not kept (it seldom comes again).
  EXPECT_EQ(g.executables(), 0u);
  EXPECT_TRUE(d.execs.empty());
}

TEST(StepGraphs, AStepLeftOpenRunsWhenTheNextBegins) {
  FakeDriver d;
  StepGraphs g(d);
  g.begin();
  d.queue("a", 1);
  g.begin();  // no download in between (a step whose outputs stay on the device)
  d.queue("b", 2);
  g.end(false);
  EXPECT_EQ(d.ran, (std::vector<Work>{{"a", 1}, {"b", 2}}));
}

TEST(StepGraphs, AnEmptyCaptureLaunchesNothing) {
  FakeDriver d;
  StepGraphs g(d);
  g.begin();
  g.end(false);
  EXPECT_EQ(describe(g.stats()), "no step ran as a CUDA graph");
  EXPECT_EQ(g.stats().captures, 0);
  EXPECT_EQ(g.stats().launches, 0);
  EXPECT_EQ(d.instantiations, 0);
}

TEST(StepGraphs, TheLeastRecentlyUsedExecutableIsDropped) {
  FakeDriver d;
  std::vector<Work> want;
  StepGraphs g(d, 2);
  auto shaped = [&](int kernels) {
    g.begin();
    for (int k = 0; k < kernels; ++k) {
      g.mix(uint64_t(k));
      d.queue("k" + std::to_string(k), kernels);
      want.push_back(Work{"k" + std::to_string(k), kernels});
    }
    g.end(false);
  };
  shaped(1);
  shaped(2);
  shaped(1);  // 1 used last; 2 is the least recent
  shaped(3);  // drops 2
  EXPECT_EQ(g.executables(), 2u);
  EXPECT_EQ(d.execs.size(), 2u);
  const int before = d.instantiations;
  shaped(1);  // still there: an update
  EXPECT_EQ(d.instantiations, before);
  shaped(2);  // dropped: instantiated again
  EXPECT_EQ(d.instantiations, before + 1);
  EXPECT_EQ(d.ran, want);
}

TEST(StepGraphs, AnInvalidatedCaptureIsAnErrorNotSilentlyLostWork) {
  FakeDriver d;
  StepGraphs g(d);
  g.begin();
  d.invalidate_next_ = true;
  d.queue("a", 1);
  EXPECT_THROW(g.end(false), Error);
  EXPECT_FALSE(g.capturing());
  EXPECT_NO_THROW(g.raise_lost());  // end() reported it itself
  // A destructor's free ends the capture quietly; the step's download raises it.
  g.begin();
  d.invalidate_next_ = true;
  d.queue("b", 2);
  g.end_quietly(true);
  EXPECT_THROW(g.raise_lost(), Error);
  EXPECT_NO_THROW(g.raise_lost());  // once
  EXPECT_TRUE(d.ran.empty());
  EXPECT_TRUE(d.graphs.empty());
}

}  // namespace
}  // namespace nibble
