// link_crypto.h: authenticated encryption of the frames of one connection after its
// handshake (AES-256-GCM through OpenSSL EVP). Keys, per connection and per direction:
//   prk  = HKDF-Extract(salt = nonce_initiator || nonce_acceptor, ikm = cluster key)
//   key  = HKDF-Expand(prk, info = label || SHA-256(hello_initiator || hello_acceptor), 32)
// with label "shardlm-v5 key initiator->acceptor" or "shardlm-v5 key acceptor->initiator",
// so both directions, every connection (fresh nonces) and any tampering with the hellos
// (which travel in clear) give different keys. A sealed frame (wire.h, flag kFlagSealed):
//   header (28 bytes, in clear, the AEAD's associated data) | ciphertext | 16-byte tag
// where the header's payload length counts ciphertext + tag, and the 96-bit GCM nonce is
//   4 zero bytes | the direction's 64-bit frame sequence number, little-endian
// taken from the receiver's own count, not from the header: a replayed, reordered or
// dropped frame, or one whose header or payload was altered, fails the tag check.
// Deliberately no I/O and no policy (who needs a key: cluster_key.h).
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "net/wire.h"

namespace net {

constexpr size_t kLinkKeyBytes = 32;  // AES-256
constexpr size_t kTagBytes = 16;      // GCM tag
constexpr size_t kGcmNonceBytes = 12;
using LinkKey = std::array<uint8_t, kLinkKeyBytes>;

struct LinkKeys {
  LinkKey send{}, recv{};
};

// The keys of one connection as seen by one end (`initiator`: the end that connected).
// nonces and hellos are the two ends' handshake values: the initiator's first.
LinkKeys derive_link_keys(std::string_view cluster_key, std::span<const uint8_t> nonce_initiator,
                          std::span<const uint8_t> nonce_acceptor, std::span<const uint8_t> hello_initiator,
                          std::span<const uint8_t> hello_acceptor, bool initiator);

// HKDF-SHA256 (RFC 5869), exposed for its test vectors.
void hkdf_sha256(std::span<const uint8_t> ikm, std::span<const uint8_t> salt, std::span<const uint8_t> info,
                 std::span<uint8_t> out);

// The 96-bit GCM nonce of frame number `seq`.
std::array<uint8_t, kGcmNonceBytes> gcm_nonce(uint64_t seq);

// One direction's AES-256-GCM state (the key schedule is set up once; each frame sets
// only its nonce). Not thread-safe: one per direction of one connection.
class FrameCipher {
 public:
  enum class Mode { kSeal, kOpen };
  FrameCipher(const LinkKey& key, Mode mode);
  ~FrameCipher();
  FrameCipher(const FrameCipher&) = delete;
  FrameCipher& operator=(const FrameCipher&) = delete;

  // kSeal: encrypts `in` into `out` (same size; may be the same memory) under frame
  // number seq, authenticating the header bytes too; writes the tag.
  void seal(uint64_t seq, const uint8_t header[kHeaderBytes], std::span<const uint8_t> in, uint8_t* out,
            uint8_t tag[kTagBytes]);
  // kOpen: decrypts in place; false when the tag does not match (then `data` is garbage).
  bool open(uint64_t seq, const uint8_t header[kHeaderBytes], std::span<uint8_t> data,
            const uint8_t tag[kTagBytes]);

 private:
  struct Ctx;
  std::unique_ptr<Ctx> ctx_;
};

}  // namespace net
