// tu_vector.h: private to kernels/cpu: the growable array for the files compiled with ISA
// flags (avx2.cc, avx512.cc, amx.cc, attention_avx512bf16.cc, neon_dotprod.cc, neon_i8mm.cc).
//
// Why not std::vector: its members are inline templates, so a file compiled with, say,
// -mavx512f emits its own copy of std::vector<float>::resize as a weak symbol, and the
// linker keeps ONE copy of each weak symbol for the whole program. Where it keeps the
// AVX-512 file's copy, every std::vector<float>::resize in the program — the tokenizer's,
// the server's — runs AVX-512 code, and a CPU without it dies with SIGILL (seen: the ASan
// build, whose -O1 inlines less, on an AVX2-only AMD EPYC, 2026-12-06; the release build
// got the baseline copy only by link order). Same on ARM with -march=armv8.2-a files on a
// Raspberry Pi 4 (ARMv8.0). This class lives in an anonymous namespace, so every file has
// its own copy with internal linkage, and it calls only non-template functions (operator
// new / delete, memcpy, memset). tools/check_isa_objects.sh (ctest IsaObjects) fails the
// build's tests if any ISA file still defines a weak function.
#pragma once
#include <cstddef>
#include <cstring>
#include <new>
#include <type_traits>

namespace kernels::cpu {
namespace {

// std::vector's subset the kernels use, for trivially copyable T: resize keeps the
// elements and zero-fills new ones (value-initialization, as std::vector), assign fills.
// Storage comes from operator new as std::vector's does (aligned for T), and only grows;
// not copyable.
template <class T>
class TuVector {
  static_assert(std::is_trivially_copyable_v<T>, "TuVector holds plain data only");

 public:
  TuVector() = default;
  explicit TuVector(size_t n) { resize(n); }
  TuVector(const TuVector&) = delete;
  TuVector& operator=(const TuVector&) = delete;
  ~TuVector() { release(p_); }

  void resize(size_t n) {
    if (n > n_) append(n);
    else n_ = n;
  }
  void assign(size_t n, T v) {
    if (n > cap_) grow(n);
    T* p = p_;
    for (size_t i = 0; i < n; ++i) p[i] = v;
    n_ = n;
  }
  T* data() { return p_; }
  const T* data() const { return p_; }
  size_t size() const { return n_; }
  T& operator[](size_t i) { return p_[i]; }
  const T& operator[](size_t i) const { return p_[i]; }

 private:
  static constexpr bool kOverAligned = alignof(T) > __STDCPP_DEFAULT_NEW_ALIGNMENT__;  // Quants32: 32
  static void release(T* p) {
    if constexpr (kOverAligned) ::operator delete(p, std::align_val_t{alignof(T)});
    else ::operator delete(p);
  }
  // Out of line, as std::vector's _M_default_append: resize stays small where it is inlined.
  [[gnu::noinline]] void append(size_t n) {
    if (n > cap_) grow(n);
    std::memset(static_cast<void*>(p_ + n_), 0, (n - n_) * sizeof(T));
    n_ = n;
  }
  void grow(size_t n) {
    const size_t cap = n > 2 * cap_ ? n : 2 * cap_;
    T* p = static_cast<T*>(kOverAligned ? ::operator new(cap * sizeof(T), std::align_val_t{alignof(T)})
                                           : ::operator new(cap * sizeof(T)));
    if (n_) std::memcpy(static_cast<void*>(p), p_, n_ * sizeof(T));
    release(p_);
    p_ = p;
    cap_ = cap;
  }

  T* p_ = nullptr;
  size_t n_ = 0, cap_ = 0;
};

}  // namespace
}  // namespace kernels::cpu
