// status.h: Status and Expected<T> for errors at boundaries (files, sockets, HTTP, user
// arguments). A message should say what is wrong and what the user can do about it.
// A failure also carries its kind (Status::Code) and, where one node is to blame, that
// node's rank: callers tell failures apart by these, never by the message's words. A new
// kind is one line in SHARDLM_STATUS_CODES (its enumerator and its name together; plus, if
// a worker reports it to the root, its wire code in net/wire.cc: the wire is a protocol).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <variant>

#include "util/check.h"

namespace util {

// The failure kinds, X(enumerator, name): Status::Code and code_name are made from this one
// list. kOk must stay first (0). Every entry ends in a backslash and the list in a comment
// line, so a kind is added (or removed) as one line, at the end as anywhere.
#define SHARDLM_STATUS_CODES(X)                                                              \
  X(kOk, "ok")                                                                               \
  X(kOther, "other")                          /* no finer kind */                            \
  X(kBadInput, "bad input")                   /* an argument, request or file is wrong: the  \
                                                 user can fix it */                          \
  X(kLostPeer, "lost peer")                   /* a peer vanished: it closed its connection   \
                                                 or cannot be reached */                     \
  X(kTimeout, "timeout")                      /* a peer did not answer, or take data, within \
                                                 the time allowed */                         \
  X(kRefused, "refused")                      /* a peer is there but will not take part (it  \
                                                 said why, or another cluster key, protocol  \
                                                 version or link setting) */                 \
  X(kTooLittleMemory, "too little memory")    /* a node cannot hold its part: fewer nodes    \
                                                 would not help */                           \
  X(kIntegrity, "integrity")                  /* a sealed frame failed its check (altered,   \
                                                 replayed, dropped) */                       \
  X(kProtocol, "protocol")                    /* a peer sent something malformed or out of   \
                                                 step */                                     \
  /* a new kind: one line above this one, ending in a backslash as every entry does */

class Status {
 public:
#define SHARDLM_STATUS_ENUMERATOR(name, text) name,
  enum class Code : uint8_t { SHARDLM_STATUS_CODES(SHARDLM_STATUS_ENUMERATOR) };
#undef SHARDLM_STATUS_ENUMERATOR
  Status() = default;
  static Status error(std::string msg, Code code = Code::kOther, int rank = -1) {
    return Status(std::move(msg), code == Code::kOk ? Code::kOther : code, rank);
  }
  bool ok() const { return code_ == Code::kOk; }
  const std::string& message() const { return msg_; }
  Code code() const { return code_; }
  bool is(Code c) const { return code_ == c; }
  int rank() const { return rank_; }  // the node to blame, or -1
  // The same failure, its rank set if none was yet (the innermost layer that knows wins).
  Status at_rank(int rank) const {
    Status s = *this;
    if (!ok() && s.rank_ < 0) s.rank_ = rank;
    return s;
  }
  // The same failure (kind and rank kept) explained with more words around it.
  Status wrap(const std::string& before, const std::string& after = "") const {
    if (ok()) return *this;
    return Status(before + msg_ + after, code_, rank_);
  }

 private:
  Status(std::string msg, Code code, int rank) : code_(code), rank_(rank), msg_(std::move(msg)) {}
  Code code_ = Code::kOk;
  int rank_ = -1;
  std::string msg_;
};
inline const char* code_name(Status::Code c) {
  switch (c) {
#define SHARDLM_STATUS_NAME(name, text) \
  case Status::Code::name:              \
    return text;
    SHARDLM_STATUS_CODES(SHARDLM_STATUS_NAME)
#undef SHARDLM_STATUS_NAME
  }
  return "?";
}

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
