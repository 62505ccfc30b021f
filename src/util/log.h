// log.h: leveled logging to stderr. Generated text goes to stdout elsewhere; logs never do.
#pragma once
#include <cstdarg>

namespace util {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };
void set_log_level(LogLevel level);
LogLevel log_level();
void log(LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace util

#define LOG_DEBUG(...) ::util::log(::util::LogLevel::kDebug, __VA_ARGS__)
#define LOG_INFO(...) ::util::log(::util::LogLevel::kInfo, __VA_ARGS__)
#define LOG_WARN(...) ::util::log(::util::LogLevel::kWarn, __VA_ARGS__)
#define LOG_ERROR(...) ::util::log(::util::LogLevel::kError, __VA_ARGS__)
