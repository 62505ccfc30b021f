// status.h: Status and Expected<T> for errors at boundaries (files, sockets, HTTP, user
// arguments). A message should say what is wrong and what the user can do about it.
// Deliberately tiny: no error codes beyond ok / not ok.
#pragma once
#include <string>
#include <utility>
#include <variant>

#include "util/check.h"

namespace util {

class Status {
 public:
  Status() = default;
  static Status error(std::string msg) { return Status(std::move(msg)); }
  bool ok() const { return !failed_; }
  const std::string& message() const { return msg_; }

 private:
  explicit Status(std::string msg) : failed_(true), msg_(std::move(msg)) {}
  bool failed_ = false;
  std::string msg_;
};

inline Status ok_status() { return Status(); }

// Expected<T>: a value or an error Status.
template <typename T>
class Expected {
 public:
  Expected(T value) : v_(std::move(value)) {}               // NOLINT: implicit by design
  Expected(Status st) : v_(std::move(st)) { CHECK(!std::get<Status>(v_).ok()); }  // NOLINT
  bool ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return ok(); }
  T& value() & { CHECK(ok()); return std::get<T>(v_); }
  T&& value() && { CHECK(ok()); return std::get<T>(std::move(v_)); }
  const T& value() const& { CHECK(ok()); return std::get<T>(v_); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const Status& status() const { CHECK(!ok()); return std::get<Status>(v_); }
  const std::string& error() const { return status().message(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace util

// RETURN_IF_ERROR(status_expr): propagate a failed Status.
#define RETURN_IF_ERROR(expr)                   \
  do {                                          \
    ::util::Status _st = (expr);                \
    if (!_st.ok()) return _st;                  \
  } while (0)
