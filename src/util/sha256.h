// sha256.h: SHA-256 of memory and files (OpenSSL), as lowercase hex. Used to identify
// model contents (golden files, a worker's cached slices).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "util/status.h"

namespace util {

std::string sha256_hex(const void* data, size_t size);
Expected<std::string> sha256_file(const std::string& path);
// sha256_file, remembered in $XDG_CACHE_HOME (or ~/.cache)/shardlm/model-hashes under the
// file's absolute path, size, inode and mtime (a rewritten file gets a new entry).
Expected<std::string> sha256_file_cached(const std::string& path);

}  // namespace util
