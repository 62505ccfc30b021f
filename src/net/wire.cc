// wire.cc: frame header encoding/validation and the little-endian Writer/Reader.
// Deliberately no I/O: bytes in, bytes or a Status out.
#include "net/wire.h"

#include <cstdio>
#include <cstring>

namespace net {

namespace {

void store_le(uint8_t* p, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t load_le(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

std::string printable_magic(const uint8_t* m) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%02x %02x %02x %02x", m[0], m[1], m[2], m[3]);
  return buf;
}

std::string fmt_bytes(uint64_t n) {
  char buf[64];
  if (n >= (uint64_t{1} << 20)) std::snprintf(buf, sizeof buf, "%llu bytes (%.1f MiB)",
                                              (unsigned long long)n, n / 1048576.0);
  else std::snprintf(buf, sizeof buf, "%llu bytes", (unsigned long long)n);
  return buf;
}

}  // namespace

bool is_known_type(uint16_t t) {
  if (t >= kAppTypeFirst && t <= kAppTypeLast) return true;
  switch (static_cast<MessageType>(t)) {
    case MessageType::kHello: case MessageType::kAuthProof: case MessageType::kAuthOk:
    case MessageType::kError: case MessageType::kBootstrap: case MessageType::kPeerHello:
    case MessageType::kReady: case MessageType::kPing: case MessageType::kPong:
    case MessageType::kAllReduce: case MessageType::kBroadcast: case MessageType::kGather:
      return true;
  }
  return false;
}

std::string type_name(MessageType t) {
  const auto v = static_cast<uint16_t>(t);
  if (v >= kAppTypeFirst && v <= kAppTypeLast) return "app+" + std::to_string(v - kAppTypeFirst);
  switch (t) {
    case MessageType::kHello: return "hello";
    case MessageType::kAuthProof: return "auth-proof";
    case MessageType::kAuthOk: return "auth-ok";
    case MessageType::kError: return "error";
    case MessageType::kBootstrap: return "bootstrap";
    case MessageType::kPeerHello: return "peer-hello";
    case MessageType::kReady: return "ready";
    case MessageType::kPing: return "ping";
    case MessageType::kPong: return "pong";
    case MessageType::kAllReduce: return "all-reduce";
    case MessageType::kBroadcast: return "broadcast";
    case MessageType::kGather: return "gather";
  }
  return "type " + std::to_string(v);
}

void encode_header(const FrameHeader& h, uint8_t out[kHeaderBytes]) {
  std::memcpy(out, kMagic, 4);
  store_le(out + 4, h.version, 2);
  store_le(out + 6, static_cast<uint16_t>(h.type), 2);
  store_le(out + 8, h.flags, 4);
  store_le(out + 12, h.seq, 8);
  store_le(out + 20, h.payload_bytes, 8);
}

Expected<FrameHeader> decode_header(const uint8_t in[kHeaderBytes], std::string_view peer,
                                    uint64_t max_payload_bytes) {
  const std::string who(peer);
  if (std::memcmp(in, kMagic, 4) != 0) {
    std::string hint = std::memcmp(in, "HTTP", 4) == 0 || std::memcmp(in, "GET ", 4) == 0
                           ? " (it looks like HTTP: is that the server port rather than the worker port?)"
                           : ": is something other than a shardlm node listening there?";
    return Status::error(who + " sent bytes that are not a shardlm frame (magic " +
                         printable_magic(in) + ", expected \"SHLM\")" + hint, util::Status::Code::kProtocol);
  }
  FrameHeader h;
  h.version = static_cast<uint16_t>(load_le(in + 4, 2));
  if (h.version != kProtocolVersion) {
    return Status::error(who + " speaks protocol " + std::to_string(h.version) +
                         ", this shardlm speaks " + std::to_string(kProtocolVersion) +
                         ": upgrade both to the same version", util::Status::Code::kRefused);
  }
  const auto type = static_cast<uint16_t>(load_le(in + 6, 2));
  h.flags = static_cast<uint32_t>(load_le(in + 8, 4));
  h.seq = load_le(in + 12, 8);
  h.payload_bytes = load_le(in + 20, 8);
  if (!is_known_type(type)) {
    return Status::error(who + " sent a frame of unknown message type " + std::to_string(type) +
                         ": the two nodes run incompatible builds", util::Status::Code::kProtocol);
  }
  h.type = static_cast<MessageType>(type);
  if ((h.flags & ~kKnownFlags) != 0) {
    return Status::error(who + " sent a frame with unknown flags 0x" + [&] {
      char b[16]; std::snprintf(b, sizeof b, "%x", h.flags); return std::string(b);
    }() + ": the two nodes run incompatible builds", util::Status::Code::kProtocol);
  }
  if (h.payload_bytes > max_payload_bytes) {
    return Status::error(who + " sent a " + type_name(h.type) + " frame of " +
                         fmt_bytes(h.payload_bytes) + ", over this node's limit of " +
                         fmt_bytes(max_payload_bytes) + ": raise the frame limit or check the peer", util::Status::Code::kProtocol);
  }
  return h;
}

std::vector<uint8_t> encode_frame(MessageType type, uint64_t seq, std::span<const uint8_t> payload) {
  std::vector<uint8_t> out(kHeaderBytes + payload.size());
  FrameHeader h;
  h.type = type;
  h.seq = seq;
  h.payload_bytes = payload.size();
  encode_header(h, out.data());
  if (!payload.empty()) std::memcpy(out.data() + kHeaderBytes, payload.data(), payload.size());
  return out;
}

// ---- Writer ----

void Writer::put_u16(uint16_t v) { uint8_t b[2]; store_le(b, v, 2); buf_.insert(buf_.end(), b, b + 2); }
void Writer::put_u32(uint32_t v) { uint8_t b[4]; store_le(b, v, 4); buf_.insert(buf_.end(), b, b + 4); }
void Writer::put_u64(uint64_t v) { uint8_t b[8]; store_le(b, v, 8); buf_.insert(buf_.end(), b, b + 8); }
void Writer::put_f32(float v) { uint32_t u; std::memcpy(&u, &v, 4); put_u32(u); }
void Writer::put_string(std::string_view s) {
  put_u32(static_cast<uint32_t>(s.size()));
  buf_.insert(buf_.end(), s.begin(), s.end());
}

// ---- Reader ----

Status Reader::need(size_t n) const {
  if (remaining() >= n) return util::ok_status();
  return Status::error(what_ + " is truncated: needed " + std::to_string(n) + " bytes at offset " +
                       std::to_string(pos_) + ", only " + std::to_string(remaining()) + " left", util::Status::Code::kProtocol);
}
Status Reader::get_u8(uint8_t* v) { RETURN_IF_ERROR(need(1)); *v = data_[pos_++]; return {}; }
Status Reader::get_u16(uint16_t* v) {
  RETURN_IF_ERROR(need(2)); *v = static_cast<uint16_t>(load_le(&data_[pos_], 2)); pos_ += 2; return {};
}
Status Reader::get_u32(uint32_t* v) {
  RETURN_IF_ERROR(need(4)); *v = static_cast<uint32_t>(load_le(&data_[pos_], 4)); pos_ += 4; return {};
}
Status Reader::get_u64(uint64_t* v) {
  RETURN_IF_ERROR(need(8)); *v = load_le(&data_[pos_], 8); pos_ += 8; return {};
}
Status Reader::get_i32(int32_t* v) {
  uint32_t u = 0; RETURN_IF_ERROR(get_u32(&u)); *v = static_cast<int32_t>(u); return {};
}
Status Reader::get_f32(float* v) {
  uint32_t u = 0; RETURN_IF_ERROR(get_u32(&u)); std::memcpy(v, &u, 4); return {};
}
Status Reader::get_bytes(size_t n, std::span<const uint8_t>* out) {
  RETURN_IF_ERROR(need(n));
  *out = data_.subspan(pos_, n);
  pos_ += n;
  return {};
}
Status Reader::get_string(std::string* s, size_t max_len) {
  uint32_t n = 0;
  RETURN_IF_ERROR(get_u32(&n));
  if (n > max_len) {
    return Status::error(what_ + " holds a string of " + std::to_string(n) +
                         " bytes at offset " + std::to_string(pos_ - 4) + ", over the limit of " +
                         std::to_string(max_len), util::Status::Code::kProtocol);
  }
  std::span<const uint8_t> b;
  RETURN_IF_ERROR(get_bytes(n, &b));
  s->assign(reinterpret_cast<const char*>(b.data()), b.size());
  return {};
}
Status Reader::finish() const {
  if (remaining() == 0) return {};
  return Status::error(what_ + " has " + std::to_string(remaining()) +
                       " unexpected trailing bytes: the two nodes run incompatible builds", util::Status::Code::kProtocol);
}

// ---- error payload ----

std::vector<uint8_t> encode_error(const ErrorMessage& e) {
  Writer w;
  w.put_u16(static_cast<uint16_t>(e.code));
  w.put_string(e.text.size() > 4096 ? e.text.substr(0, 4096) : e.text);
  return w.take();
}

Expected<ErrorMessage> parse_error(std::span<const uint8_t> payload, std::string_view peer) {
  Reader r(payload, "error message from " + std::string(peer));
  ErrorMessage e;
  uint16_t code = 0;
  RETURN_IF_ERROR(r.get_u16(&code));
  RETURN_IF_ERROR(r.get_string(&e.text, 4096));
  RETURN_IF_ERROR(r.finish());
  e.code = code <= uint16_t(ErrorCode::kLast) ? ErrorCode(code) : ErrorCode::kOther;
  return e;
}

// kIntegrity is sent only by the connection that found the bad frame (socket.cc), and
// kKeyMismatch only by the handshake: a session's refusal is kOther or a kind below.
ErrorCode error_code(const Status& st) {
  return st.is(Status::Code::kTooLittleMemory) ? ErrorCode::kTooLittleMemory : ErrorCode::kOther;
}

Status::Code status_code(ErrorCode c) {
  switch (c) {
    case ErrorCode::kIntegrity: return Status::Code::kIntegrity;
    case ErrorCode::kTooLittleMemory: return Status::Code::kTooLittleMemory;
    case ErrorCode::kOther: case ErrorCode::kKeyMismatch: break;
  }
  return Status::Code::kRefused;
}

}  // namespace net
