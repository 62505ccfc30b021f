#include "util/check.h"

#include <cstdio>
#include <cstdlib>

namespace util {
void check_failed(const char* file, int line, const char* cond, const char* msg) {
  std::fprintf(stderr, "CHECK failed at %s:%d: %s %s\n", file, line, cond, msg ? msg : "");
  std::abort();
}
}  // namespace util
