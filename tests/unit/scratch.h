// Per-process scratch directory for unit tests: ctest runs test binaries in parallel
// processes (rewriting a file another process has mapped kills it with SIGBUS), so each
// process gets its own directory, and the directory is removed when the process exits.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

namespace shardlm_test {

inline std::string scratch_path(const std::string& name) {
  struct Dir {
    std::filesystem::path path = std::filesystem::temp_directory_path() /
                                 ("shardlm_test_" + std::to_string(::getpid()));
    Dir() { std::filesystem::create_directories(path); }
    ~Dir() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  static Dir dir;
  return (dir.path / name).string();
}

}  // namespace shardlm_test
