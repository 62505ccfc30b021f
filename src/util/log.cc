// log.cc: stderr logger with a global level.
#include "util/log.h"

#include <atomic>
#include <cstdio>

namespace util {

static std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};

void set_log_level(LogLevel level) { g_level = static_cast<int>(level); }
LogLevel log_level() { return static_cast<LogLevel>(g_level.load()); }

void log(LogLevel level, const char* fmt, ...) {
  if (static_cast<int>(level) < g_level.load()) return;
  static const char* kNames[] = {"debug", "info", "warning", "error"};
  std::fprintf(stderr, "%s: ", kNames[static_cast<int>(level)]);
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(stderr, fmt, ap);
  va_end(ap);
  std::fputc('\n', stderr);
}

}  // namespace util
