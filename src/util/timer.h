// timer.h: monotonic wall-clock timing helpers.
#pragma once
#include <chrono>

namespace util {

inline double now_seconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

class Timer {
 public:
  Timer() : start_(now_seconds()) {}
  double seconds() const { return now_seconds() - start_; }
  double ms() const { return seconds() * 1e3; }
  void reset() { start_ = now_seconds(); }

 private:
  double start_;
};

}  // namespace util
