// zeroed_buffer.h: a fixed-size byte buffer that reads as zeros and takes physical memory only
// where it is written: anonymous private pages, which the kernel maps to its zero page until
// the first write. For the KV pool (model/kv_cache.h): std::vector::resize wrote every byte at
// start-up, so a pool sized for --parallel full contexts cost its whole size in RAM (and the
// time to clear it) before the first request; now memory follows the positions in use. Move-only.
#pragma once
#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <new>
#include <utility>

namespace util {

class ZeroedBuffer {
 public:
  ZeroedBuffer() = default;
  explicit ZeroedBuffer(size_t n) : size_(n) {
    if (n == 0) return;
    void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    data_ = static_cast<uint8_t*>(p);
  }
  ZeroedBuffer(ZeroedBuffer&& o) noexcept : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  ZeroedBuffer& operator=(ZeroedBuffer&& o) noexcept {
    if (this != &o) {
      release();
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  ZeroedBuffer(const ZeroedBuffer&) = delete;
  ZeroedBuffer& operator=(const ZeroedBuffer&) = delete;
  ~ZeroedBuffer() { release(); }

  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  void release() {
    if (data_) ::munmap(data_, size_);
    data_ = nullptr;
  }
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace util
