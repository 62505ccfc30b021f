// cluster_key.h: where a node's cluster key comes from and when one is required.
//   * A key is any non-empty string, used as given (HMAC and HKDF input, never sent).
//     `shardlm keygen` makes one: 32 random bytes as 64 hex characters.
//   * Sources, first match wins: --cluster-key KEY (visible in `ps`), --cluster-key-file
//     FILE (first line, surrounding whitespace trimmed), $SHARDLM_CLUSTER_KEY.
//   * A worker that listens on an address other than loopback needs a key; without one it
//     refuses to start (and says how to make one) unless --insecure is given, which warns.
//     `--link-encryption off` (keyed handshake, frames in clear) needs --insecure too.
// Deliberately no cryptography here (handshake.h, link_crypto.h) and no printing: the
// caller prints the returned warnings.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "util/status.h"

namespace net {

constexpr const char* kClusterKeyEnv = "SHARDLM_CLUSTER_KEY";
constexpr size_t kMinKeyChars = 16;  // shorter keys get a warning

// 32 bytes from RAND_bytes as 64 lowercase hex characters.
std::string generate_cluster_key();
// Writes key + "\n" to a new file with mode 0600; refuses to replace an existing file
// unless `overwrite`.
util::Status write_key_file(const std::string& path, const std::string& key, bool overwrite);
// Reads a key file; a warning (appended) when others than the owner may read it.
util::Expected<std::string> read_key_file(const std::string& path, std::vector<std::string>* warnings);

// The key from the three sources (above); "" when none is set. Giving both --cluster-key
// and --cluster-key-file is refused. Warns about a short key.
util::Expected<std::string> resolve_cluster_key(const std::string& flag_key, const std::string& key_file,
                                                std::vector<std::string>* warnings);

// 127.0.0.0/8, ::1, "localhost" (not resolved names, not "" or 0.0.0.0).
bool is_loopback_host(std::string_view host);

// The worker's start-up rule (above). Error when it must not start; warnings otherwise.
util::Status check_worker_security(const std::string& host, const std::string& key, bool insecure,
                                   bool link_encryption, std::vector<std::string>* warnings);
// The root's: `--link-encryption off` needs --insecure; warns when links to workers that
// are not on loopback carry no key (they are then in clear and unauthenticated).
util::Status check_root_security(const std::vector<std::string>& workers, const std::string& key, bool insecure,
                                 bool link_encryption, std::vector<std::string>* warnings);

}  // namespace net
