// cluster_key.cc: key generation, key files and the start-up rules (cluster_key.h).
// Deliberately POSIX file calls only (the mode of a key file matters).
#include "net/cluster_key.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "net/socket.h"

namespace net {

using util::Expected;
using util::Status;

namespace {

constexpr size_t kMaxKeyFileBytes = 4096;

std::string trim(std::string_view s) {
  const char* ws = " \t\r\n";
  const size_t a = s.find_first_not_of(ws);
  if (a == std::string_view::npos) return "";
  const size_t b = s.find_last_not_of(ws);
  return std::string(s.substr(a, b - a + 1));
}

const char* kHowToMakeKey =
    "make one with `shardlm keygen --out FILE`, copy FILE to every node and start the workers and the root with "
    "--cluster-key-file FILE (or put the key in $SHARDLM_CLUSTER_KEY)";

}  // namespace

std::string generate_cluster_key() {
  uint8_t b[32];
  CHECK_MSG(RAND_bytes(b, sizeof b) == 1, "RAND_bytes failed");
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (uint8_t v : b) {
    s.push_back(hex[v >> 4]);
    s.push_back(hex[v & 15]);
  }
  OPENSSL_cleanse(b, sizeof b);
  return s;
}

Status write_key_file(const std::string& path, const std::string& key, bool overwrite) {
  const int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (overwrite ? O_TRUNC : O_EXCL);
  const int fd = ::open(path.c_str(), flags, 0600);
  if (fd < 0) {
    if (errno == EEXIST)
      return Status::error(path + " already exists: choose another file, or add --force to replace it");
    return Status::error("cannot create " + path + ": " + std::strerror(errno));
  }
  // An existing file opened with O_TRUNC keeps its mode: make it owner-only.
  if (::fchmod(fd, 0600) != 0) {
    const int e = errno;
    ::close(fd);
    return Status::error("cannot set mode 0600 on " + path + ": " + std::strerror(e));
  }
  const std::string text = key + "\n";
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t w = ::write(fd, text.data() + done, text.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const int e = errno;
      ::close(fd);
      return Status::error("cannot write " + path + ": " + std::strerror(e));
    }
    done += size_t(w);
  }
  if (::close(fd) != 0) return Status::error("cannot write " + path + ": " + std::strerror(errno));
  return {};
}

Expected<std::string> read_key_file(const std::string& path, std::vector<std::string>* warnings) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::error("cannot read the cluster key file " + path + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) == 0 && (st.st_mode & 077) != 0 && warnings)
    warnings->push_back("the cluster key file " + path + " can be read by other users: chmod 600 " + path);
  std::string text;
  char buf[512];
  for (;;) {
    const ssize_t r = ::read(fd, buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      const int e = errno;
      ::close(fd);
      return Status::error("cannot read the cluster key file " + path + ": " + std::strerror(e));
    }
    if (r == 0) break;
    text.append(buf, size_t(r));
    if (text.size() > kMaxKeyFileBytes) {
      ::close(fd);
      return Status::error("the cluster key file " + path + " is over " + std::to_string(kMaxKeyFileBytes) +
                           " bytes: is it really a key? (`shardlm keygen --out FILE` makes one)");
    }
  }
  ::close(fd);
  const size_t nl = text.find('\n');
  std::string key = trim(nl == std::string::npos ? text : text.substr(0, nl));
  OPENSSL_cleanse(text.data(), text.size());
  if (key.empty()) return Status::error("the cluster key file " + path + " is empty: " + kHowToMakeKey);
  return key;
}

Expected<std::string> resolve_cluster_key(const std::string& flag_key, const std::string& key_file,
                                          std::vector<std::string>* warnings) {
  if (!flag_key.empty() && !key_file.empty())
    return Status::error("give either --cluster-key or --cluster-key-file, not both");
  std::string key;
  if (!flag_key.empty()) {
    key = flag_key;
  } else if (!key_file.empty()) {
    auto k = read_key_file(key_file, warnings);
    if (!k.ok()) return k.status();
    key = std::move(*k);
  } else if (const char* env = std::getenv(kClusterKeyEnv); env && *env) {
    key = trim(env);
    if (key.empty()) return Status::error(std::string("$") + kClusterKeyEnv + " holds only white space");
  }
  if (!key.empty() && key.size() < kMinKeyChars && warnings)
    warnings->push_back("the cluster key has only " + std::to_string(key.size()) +
                        " characters: a captured handshake lets anyone try to guess it offline; " + kHowToMakeKey);
  return key;
}

bool is_loopback_host(std::string_view host_in) {
  std::string host(host_in);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host == "localhost") return true;
  in_addr a4{};
  if (inet_pton(AF_INET, host.c_str(), &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
  in6_addr a6{};
  if (inet_pton(AF_INET6, host.c_str(), &a6) == 1) return IN6_IS_ADDR_LOOPBACK(&a6);
  return false;
}

Status check_worker_security(const std::string& host, const std::string& key, bool insecure, bool link_encryption,
                             std::vector<std::string>* warnings) {
  const std::string where = host.empty() ? "every address" : host;
  if (!link_encryption && !insecure)
    return Status::error("--link-encryption off sends activations and weights in clear: it needs --insecure too");
  if (!link_encryption && key.empty())
    return Status::error("--link-encryption off only applies with a cluster key (without one links are in clear anyway)");
  if (key.empty() && !is_loopback_host(host)) {
    if (!insecure)
      return Status::error("refusing to listen on " + where +
                           " without a cluster key: anyone who can reach the port could join the cluster, make it "
                           "compute, read its activations or feed it weights. " + std::string(kHowToMakeKey) +
                           "; or listen on loopback only (--host 127.0.0.1); --insecure starts without a key anyway");
    if (warnings)
      warnings->push_back("--insecure: listening on " + where +
                          " without a cluster key; anyone who can reach the port can use this worker, and its "
                          "links are neither encrypted nor authenticated");
  } else if (!link_encryption && warnings) {
    warnings->push_back("--insecure --link-encryption off: frames travel in clear and unauthenticated after the "
                        "key handshake");
  }
  return {};
}

Status check_root_security(const std::vector<std::string>& workers, const std::string& key, bool insecure,
                           bool link_encryption, std::vector<std::string>* warnings) {
  if (!link_encryption && !insecure)
    return Status::error("--link-encryption off sends activations and weights in clear: it needs --insecure too");
  if (!link_encryption && key.empty())
    return Status::error("--link-encryption off only applies with a cluster key (without one links are in clear anyway)");
  if (!warnings || workers.empty()) return {};
  if (!link_encryption) {
    warnings->push_back("--insecure --link-encryption off: frames to the workers travel in clear and unauthenticated");
    return {};
  }
  if (!key.empty()) return {};
  for (const auto& w : workers) {
    auto hp = parse_host_port(w);
    if (hp.ok() && !is_loopback_host(hp->host)) {
      warnings->push_back("no cluster key: the links to the workers (" + w +
                          ", ...) are neither encrypted nor authenticated; " + kHowToMakeKey);
      break;
    }
  }
  return {};
}

}  // namespace net
