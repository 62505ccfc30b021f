// check.h: CHECK macros for internal invariants (programming errors). They abort with
// file:line and a message. Not for bad user input: that goes through Status/Expected.
#pragma once
#include <cstdio>
#include <cstdlib>

namespace util {
// Out of line (check.cc): an inline function would be emitted by every file that calls it,
// the ISA-flagged kernel files included, and the linker might keep their copy (tu_vector.h).
[[noreturn]] void check_failed(const char* file, int line, const char* cond, const char* msg);
}  // namespace util

#define CHECK(cond)                                                  \
  do {                                                               \
    if (!(cond)) ::util::check_failed(__FILE__, __LINE__, #cond, nullptr); \
  } while (0)
#define CHECK_MSG(cond, msg)                                         \
  do {                                                               \
    if (!(cond)) ::util::check_failed(__FILE__, __LINE__, #cond, msg); \
  } while (0)
