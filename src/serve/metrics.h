// metrics.h: /metrics in Prometheus' text format: the requests answered (by route and
// status code, counted by the server's logger) and the engine's counters and gauges.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "serve/engine.h"

namespace serve {

// Requests answered, by route and status code, for /metrics.
class RequestCounter {
 public:
  void add(const std::string& path, int status) {
    std::lock_guard<std::mutex> lock(mu_);
    counts_[{path, status}]++;
  }
  std::map<std::pair<std::string, int>, uint64_t> snapshot() const {
    std::lock_guard<std::mutex> lock(mu_);
    return counts_;
  }

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> counts_;
};

// The text of /metrics (text/plain; version=0.0.4).
std::string metrics_text(const EngineMetrics& m, const RequestCounter& rc);

}  // namespace serve
