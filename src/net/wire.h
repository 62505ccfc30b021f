// wire.h: the shardlm wire format. Every message is one frame: a fixed 28-byte header
//   offset 0  magic "SHLM"            4 bytes
//          4  protocol version        u16
//          6  message type            u16
//          8  flags                   u32 (kFlagSealed, or 0)
//         12  sequence number         u64 (per connection and direction, from 0)
//         20  payload length          u64
// followed by the payload. Every field is written and read explicitly little-endian by
// Writer / Reader (never a raw struct on the wire). decode_header() refuses a frame from
// another protocol version, a wrong magic, unknown flags, an unknown type and a frame over
// the size limit, each with a message that names the peer.
// Once a keyed handshake is done (handshake.h), every later frame of the connection is
// sealed (link_crypto.h): flags = kFlagSealed, the payload is AES-256-GCM ciphertext of
// the message followed by its 16-byte tag (the payload length counts both), and the
// header is authenticated as associated data. Without a key on either side (loopback,
// --insecure) frames stay in clear with flags 0. The header itself is never encrypted.
// Deliberately no I/O here (see socket.h) and no knowledge of what payloads mean beyond
// the small error payload shared by every layer.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "util/status.h"

namespace net {

using util::Expected;
using util::Status;

constexpr uint8_t kMagic[4] = {'S', 'H', 'L', 'M'};
constexpr uint16_t kProtocolVersion = 15;  // 15: the setup's --attn-bf16 bit; 14: the setup carries the host KV cache's blocks (each node's memory check); 13: steps carry host KV cache copies (--cache-ram); 12: step replies carry the rows counted; 11: paged KV cache (pool blocks in setup, block entries per step segment); 10: gpt-oss and YaRN config fields; 9: token masks (constrained decoding); 8: every-row steps, MoE
constexpr size_t kHeaderBytes = 28;
constexpr uint64_t kDefaultMaxFrameBytes = uint64_t{1} << 30;  // 1 GiB
// Frame flags. kFlagSealed: the payload is ciphertext + tag (link_crypto.h).
constexpr uint32_t kFlagSealed = 1u << 0;
constexpr uint32_t kKnownFlags = kFlagSealed;

// Message types. 1..63: connection setup; 64..127: collectives; 0x1000..0x1fff: free for
// the runtime (weights, step messages, logits...), named by the runtime itself.
enum class MessageType : uint16_t {
  kHello = 1,       // handshake: versions, role, nonce (handshake.h)
  kAuthProof = 2,   // handshake: HMAC proof of the cluster key
  kAuthOk = 3,      // handshake: initiator accepted the acceptor's proof
  kError = 4,       // a peer explains why it gives up (code + text), then closes
  kBootstrap = 5,   // root -> worker: session id, rank, size, worker addresses
  kPeerHello = 6,   // worker -> worker after the handshake: session id and rank
  kReady = 7,       // worker -> root: mesh complete
  kPing = 8,        // latency / bandwidth probes
  kPong = 9,
  kAllReduce = 64,  // collective payloads (collectives.h)
  kBroadcast = 65,
  kGather = 66,
};
constexpr uint16_t kAppTypeFirst = 0x1000;
constexpr uint16_t kAppTypeLast = 0x1fff;
// The i-th runtime-defined message type (0 <= i < 4096).
constexpr MessageType app_message(uint16_t i) { return MessageType(uint16_t(kAppTypeFirst + i)); }

bool is_known_type(uint16_t t);
std::string type_name(MessageType t);  // "hello", "all-reduce", "app+3", ...

struct FrameHeader {
  uint16_t version = kProtocolVersion;
  MessageType type = MessageType::kError;
  uint32_t flags = 0;  // kFlagSealed or 0
  uint64_t seq = 0;
  uint64_t payload_bytes = 0;
};

// Writes the 28 header bytes to out.
void encode_header(const FrameHeader& h, uint8_t out[kHeaderBytes]);
// Parses and validates a header; `peer` names the sender in every message
// ("worker 10.0.0.2:9000"). Refuses magic, version, flags, type and size.
Expected<FrameHeader> decode_header(const uint8_t in[kHeaderBytes], std::string_view peer,
                                    uint64_t max_payload_bytes);
// A whole frame in one buffer (header + payload): used by tests and the fuzzer.
std::vector<uint8_t> encode_frame(MessageType type, uint64_t seq, std::span<const uint8_t> payload);

// Little-endian byte-buffer writer.
class Writer {
 public:
  void put_u8(uint8_t v) { buf_.push_back(v); }
  void put_u16(uint16_t v);
  void put_u32(uint32_t v);
  void put_u64(uint64_t v);
  void put_i32(int32_t v) { put_u32(static_cast<uint32_t>(v)); }
  void put_f32(float v);
  void put_bytes(std::span<const uint8_t> b) { buf_.insert(buf_.end(), b.begin(), b.end()); }
  void put_string(std::string_view s);  // u32 length + bytes
  std::vector<uint8_t>& bytes() { return buf_; }
  std::vector<uint8_t> take() { return std::move(buf_); }

 private:
  std::vector<uint8_t> buf_;
};

// Bounds-checked little-endian reader. `what` names the message in errors
// ("hello from worker 10.0.0.2:9000").
class Reader {
 public:
  Reader(std::span<const uint8_t> data, std::string what) : data_(data), what_(std::move(what)) {}
  Status get_u8(uint8_t* v);
  Status get_u16(uint16_t* v);
  Status get_u32(uint32_t* v);
  Status get_u64(uint64_t* v);
  Status get_i32(int32_t* v);
  Status get_f32(float* v);
  Status get_bytes(size_t n, std::span<const uint8_t>* out);  // a view into the buffer
  Status get_string(std::string* s, size_t max_len);
  Status finish() const;  // refuses trailing bytes
  size_t remaining() const { return data_.size() - pos_; }
  size_t pos() const { return pos_; }

 private:
  Status need(size_t n) const;
  std::span<const uint8_t> data_;
  size_t pos_ = 0;
  std::string what_;
};

// Payload of kError: why a peer gives up. `code` lets the receiver phrase its own
// message (naming the peer from its side); `text` is the sender's explanation.
// The codes are how a worker's failure kind (util::Status::Code) reaches the root; a code
// this build does not know reads as kOther.
enum class ErrorCode : uint16_t {
  kOther = 0,            // text only: the sender refuses (Status::Code::kRefused)
  kKeyMismatch = 1,      // the sender checked our cluster key proof and it was wrong
  kIntegrity = 2,        // a frame we sent failed the sender's integrity check (link_crypto.h)
  kTooLittleMemory = 3,  // the sender cannot hold its part of the session
  kLast = kTooLittleMemory,
};
// The wire code of a session failure a node sends its peer (error_code), and the kind a
// received code is at the receiver (status_code: kOther and kKeyMismatch read as refused).
// A new kind that must cross the wire: one ErrorCode value and its line in each.
ErrorCode error_code(const Status& st);
Status::Code status_code(ErrorCode c);
struct ErrorMessage {
  ErrorCode code = ErrorCode::kOther;
  std::string text;
};
std::vector<uint8_t> encode_error(const ErrorMessage& e);
Expected<ErrorMessage> parse_error(std::span<const uint8_t> payload, std::string_view peer);

}  // namespace net
