// check.h: CHECK macros for internal invariants (programming errors). They abort with
// file:line and a message. Not for bad user input: that goes through Status/Expected.
#pragma once
#include <cstdio>
#include <cstdlib>

namespace util {
[[noreturn]] inline void check_failed(const char* file, int line, const char* cond, const char* msg) {
  std::fprintf(stderr, "CHECK failed at %s:%d: %s %s\n", file, line, cond, msg ? msg : "");
  std::abort();
}
}  // namespace util

#define CHECK(cond)                                                  \
  do {                                                               \
    if (!(cond)) ::util::check_failed(__FILE__, __LINE__, #cond, nullptr); \
  } while (0)
#define CHECK_MSG(cond, msg)                                         \
  do {                                                               \
    if (!(cond)) ::util::check_failed(__FILE__, __LINE__, #cond, msg); \
  } while (0)
