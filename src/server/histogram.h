// A Prometheus histogram (cumulative buckets, sum, count) of latencies in
// seconds, and its text exposition. Bucket bounds are vLLM's for the same
// metrics, so dashboards written for vllm:time_to_first_token_seconds read
// nibble's as they are.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace nibble::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

  void observe(double seconds) {
    size_t i = 0;
    while (i < bounds_.size() && seconds > bounds_[i]) ++i;  // Prometheus: le = "less than or equal"
    ++counts_[i];
    sum_ += seconds;
    ++count_;
  }
  int64_t count() const { return count_; }
  double sum() const { return sum_; }

  // "# HELP", "# TYPE" and the _bucket / _sum / _count lines of `name`.
  std::string exposition(const std::string& name, const std::string& help) const;

  // vLLM's buckets (vllm/v1/metrics/loggers.py).
  static std::vector<double> ttft_bounds() {
    return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
            80.0, 160.0, 640.0, 2560.0};
  }
  static std::vector<double> tpot_bounds() {
    return {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
  }
  static std::vector<double> e2e_bounds() {
    return {0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0,
            960.0, 1920.0, 7680.0};
  }

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;  // per bucket, not cumulative; the last is +Inf
  double sum_ = 0;
  int64_t count_ = 0;
};

inline std::string Histogram::exposition(const std::string& name, const std::string& help) const {
  std::string out = "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
  int64_t cumulative = 0;
  char le[64];
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i];
    if (i < bounds_.size()) std::snprintf(le, sizeof le, "%g", bounds_[i]);
    else std::snprintf(le, sizeof le, "+Inf");
    out += name + "_bucket{le=\"" + le + "\"} " + std::to_string(cumulative) + "\n";
  }
  char sum[64];
  std::snprintf(sum, sizeof sum, "%.9g", sum_);
  out += name + "_sum " + sum + "\n" + name + "_count " + std::to_string(count_) + "\n";
  return out;
}

}  // namespace nibble::server
