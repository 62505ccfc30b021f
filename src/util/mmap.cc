// mmap.cc: POSIX implementation of MappedFile.
#include "util/mmap.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <cstdlib>
#include <cstdint>

namespace util {

Expected<std::unique_ptr<MappedFile>> MappedFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return Status::error("cannot open '" + path + "': " + std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::error("'" + path + "' is not a regular file");
  }
  std::unique_ptr<MappedFile> f(new MappedFile());
  f->path_ = path;
  f->size_ = static_cast<size_t>(st.st_size);
  if (f->size_ > 0) {
    void* p = mmap(nullptr, f->size_, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      return Status::error("cannot map '" + path + "': " + std::strerror(errno));
    }
    f->data_ = static_cast<const uint8_t*>(p);
    if (getenv("SHARDLM_HUGE")) {
      size_t sz = (f->size_ + (2u << 20) - 1) / (2u << 20) * (2u << 20);
      void* a = mmap(nullptr, sz + (2u<<20), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      uint8_t* al = (uint8_t*)(((uintptr_t)a + (2u<<20) - 1) / (2u<<20) * (2u<<20));
      madvise(al, sz, MADV_HUGEPAGE);
      memcpy(al, p, f->size_);
      munmap(p, f->size_);
      f->data_ = al; f->size_ = sz;
    }
  }
  ::close(fd);
  return f;
}

MappedFile::~MappedFile() {
  if (data_) munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace util
