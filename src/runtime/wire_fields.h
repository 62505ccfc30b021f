// wire_fields.h: the two directions a message's field list runs in (runtime/protocol.h's
// M::fields, run by protocol.cc). Each message's fields are listed once, as a function
// template over the direction:
//   static util::Status fields(auto& io, auto& s) {
//     RETURN_IF_ERROR(io.str(s.model_hash, 128));
//     RETURN_IF_ERROR(io.f64(s.alpha_us, s.beta_gbps)); ...
// Out (M const) writes every field little-endian with net::Writer; In (M mutable) reads
// each back with the bounds-checked net::Reader into the same place, refusing what the
// field cannot hold (an unknown enum value, flag bits beyond the listed ones, a count
// longer than the bytes left) with "<what> <reason>". So the encoder and the parser cannot
// drift apart: a new field is one line in one list. What the message must be as a whole
// (consistent shapes, ranges) ends the list as io.check(condition, reason): only In refuses.
// Deliberately nothing about any one message here.
#pragma once
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "net/wire.h"
#include "plan/plan.h"
#include "tensor/types.h"
#include "util/status.h"

namespace runtime::wire {

using util::Status;

class Out {
 public:
  static constexpr bool kParsing = false;

  template <class... T>
  Status i32(const T&... v) {  // int, int32_t
    (w_.put_i32(int32_t(v)), ...);
    return util::ok_status();
  }
  template <class... T>
  Status u64(const T&... v) {
    (w_.put_u64(uint64_t(v)), ...);
    return util::ok_status();
  }
  template <class... T>
  Status f32(const T&... v) {
    (w_.put_f32(float(v)), ...);
    return util::ok_status();
  }
  template <class... T>
  Status f64(const T&... v) {
    (put_f64(double(v)), ...);
    return util::ok_status();
  }
  template <class... T>
  Status boolean(const T&... v) {  // a byte each, any non-zero is true
    (w_.put_u8(uint8_t(v)), ...);
    return util::ok_status();
  }
  template <class... R>
  Status range(const R&... r) {  // plan::Range: begin, end
    ((w_.put_i32(r.begin), w_.put_i32(r.end)), ...);
    return util::ok_status();
  }
  Status str(const std::string& s, size_t) {
    w_.put_string(s);
    return util::ok_status();
  }
  Status type(const tensor::Type& t) {  // a supported tensor type's id, u32
    w_.put_u32(uint32_t(t));
    return util::ok_status();
  }
  // A u8 enum whose values are 0 ..= max.
  template <class E>
  Status enum8(const E& v, E, const char*) {
    w_.put_u8(uint8_t(v));
    return util::ok_status();
  }
  // A signed byte <= max (-1: none).
  Status i8(const int8_t& v, int8_t, const char*) {
    w_.put_u8(uint8_t(v));
    return util::ok_status();
  }
  // One byte of flags: the first field is bit 0, the next bit 1, ...; other bits refused.
  template <class... B>
  Status bits(const char*, const B&... b) {
    uint8_t u = 0, i = 0;
    ((u |= uint8_t(uint8_t(b) << i++)), ...);
    w_.put_u8(u);
    return util::ok_status();
  }
  // One byte: a value in the bits of low_mask, and flags at the given high bits.
  template <class E>
  Status packed(const E& low, uint8_t, const bool& b7, const bool& b6) {
    w_.put_u8(uint8_t(uint8_t(low) | (b7 ? 0x80 : 0) | (b6 ? 0x40 : 0)));
    return util::ok_status();
  }
  Status bytes(const std::span<const uint8_t>& b) {  // u64 length + the bytes
    w_.put_u64(b.size());
    w_.put_bytes(b);
    return util::ok_status();
  }
  // A u32 count and each element's fields (each(io, element)); an In refuses a count of
  // more elements than the bytes left could hold at min_bytes each (and 0 when nonempty).
  template <class V, class F>
  Status list(const V& v, size_t, const char*, F&& each, bool = false) {
    w_.put_u32(uint32_t(v.size()));
    for (const auto& x : v) RETURN_IF_ERROR(each(*this, x));
    return util::ok_status();
  }
  // A condition only a parser checks (a value the field can carry but the message must not).
  Status check(bool, const char*) { return util::ok_status(); }
  net::Writer& writer() { return w_; }
  std::vector<uint8_t> take() { return w_.take(); }

 private:
  void put_f64(double v) {
    uint64_t u;
    std::memcpy(&u, &v, 8);
    w_.put_u64(u);
  }
  net::Writer w_;
};

class In {
 public:
  static constexpr bool kParsing = true;
  In(std::span<const uint8_t> p, std::string what) : r_(p, what), what_(std::move(what)) {}

  template <class... T>
  Status i32(T&... v) {
    return all([&](auto& x) {
      int32_t u = 0;
      RETURN_IF_ERROR(r_.get_i32(&u));
      x = u;
      return util::ok_status();
    }, v...);
  }
  template <class... T>
  Status u64(T&... v) {
    return all([&](auto& x) { return r_.get_u64(&x); }, v...);
  }
  template <class... T>
  Status f32(T&... v) {
    return all([&](auto& x) { return r_.get_f32(&x); }, v...);
  }
  template <class... T>
  Status f64(T&... v) {
    return all([&](auto& x) {
      uint64_t u = 0;
      RETURN_IF_ERROR(r_.get_u64(&u));
      std::memcpy(&x, &u, 8);
      return util::ok_status();
    }, v...);
  }
  template <class... T>
  Status boolean(T&... v) {
    return all([&](auto& x) {
      uint8_t u = 0;
      RETURN_IF_ERROR(r_.get_u8(&u));
      x = u != 0;
      return util::ok_status();
    }, v...);
  }
  template <class... R>
  Status range(R&... r) {
    return all([&](plan::Range& x) { return i32(x.begin, x.end); }, r...);
  }
  Status str(std::string& s, size_t max_len) { return r_.get_string(&s, max_len); }
  Status type(tensor::Type& t) {
    uint32_t id = 0;
    RETURN_IF_ERROR(r_.get_u32(&id));
    auto tr = tensor::type_traits(id);
    if (!tr || !tr->supported) return Status::error(what_ + " names unknown tensor type " + std::to_string(id));
    t = tensor::Type(id);
    return util::ok_status();
  }
  template <class E>
  Status enum8(E& v, E max, const char* bad) {
    uint8_t u = 0;
    RETURN_IF_ERROR(r_.get_u8(&u));
    if (u > uint8_t(max)) return refuse(bad);
    v = E(u);
    return util::ok_status();
  }
  Status i8(int8_t& v, int8_t max, const char* bad) {
    uint8_t u = 0;
    RETURN_IF_ERROR(r_.get_u8(&u));
    v = int8_t(u);
    return v > max ? refuse(bad) : util::ok_status();
  }
  template <class... B>
  Status bits(const char* bad, B&... b) {
    uint8_t u = 0, i = 0;
    RETURN_IF_ERROR(r_.get_u8(&u));
    if (u >> sizeof...(B)) return refuse(bad);
    ((b = static_cast<B>((u >> i++) & 1)), ...);
    return util::ok_status();
  }
  template <class E>
  Status packed(E& low, uint8_t low_mask, bool& b7, bool& b6) {
    uint8_t u = 0;
    RETURN_IF_ERROR(r_.get_u8(&u));
    b7 = u & 0x80;
    b6 = u & 0x40;
    low = E(u & low_mask);
    return util::ok_status();
  }
  Status bytes(std::span<const uint8_t>& b) {
    uint64_t n = 0;
    RETURN_IF_ERROR(r_.get_u64(&n));
    return r_.get_bytes(n, &b);
  }
  template <class V, class F>
  Status list(V& v, size_t min_bytes, const char* too_many, F&& each, bool nonempty = false) {
    uint32_t n = 0;
    RETURN_IF_ERROR(r_.get_u32(&n));
    if ((nonempty && n == 0) || n > r_.remaining() / min_bytes) return refuse(too_many);
    v.resize(n);
    for (auto& x : v) RETURN_IF_ERROR(each(*this, x));
    return util::ok_status();
  }
  Status check(bool ok, const char* bad) { return ok ? util::ok_status() : refuse(bad); }
  net::Reader& reader() { return r_; }
  const std::string& what() const { return what_; }
  Status finish() const { return r_.finish(); }
  Status refuse(const char* why) const { return Status::error(what_ + " " + why); }

 private:
  template <class F, class... T>
  Status all(F&& f, T&... v) {
    Status st;
    ((st.ok() ? (st = f(v), 0) : 0), ...);
    return st;
  }
  net::Reader r_;
  std::string what_;
};

}  // namespace runtime::wire
