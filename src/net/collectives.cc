// collectives.cc: value encodings, the three all-reduce algorithms, broadcast, gather and
// their byte accounting. Deliberately plain loops with no FMA-prone expressions: a sum is
// a chain of float additions in a fixed order, which is what makes results bit-identical.
#include "net/collectives.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "tensor/quants.h"
#include "util/timer.h"

namespace net {

namespace {

constexpr size_t kBlock = 32;
constexpr size_t kQ8Bytes = 34;

enum class Op : uint8_t { kAllGather = 0, kStarUp = 1, kStarDown = 2, kRingRs = 3, kRingAg = 4, kGatherRows = 5 };
const char* op_name(Op o) {
  switch (o) {
    case Op::kAllGather: return "all-gather";
    case Op::kStarUp: return "star partial";
    case Op::kStarDown: return "star result";
    case Op::kRingRs: return "ring reduce-scatter";
    case Op::kRingAg: return "ring all-gather";
    case Op::kGatherRows: return "row gather";
  }
  return "?";
}

struct CHeader {
  Op op;
  SyncType sync;
  uint16_t step;
  uint32_t offset, count;
};

// Header + encoded values in one buffer.
std::vector<uint8_t> make_payload(const CHeader& h, std::span<const float> x) {
  std::vector<uint8_t> out(kCollectiveHeaderBytes + encoded_bytes(h.sync, x.size()));
  Writer w;
  w.put_u8(static_cast<uint8_t>(h.op));
  w.put_u8(static_cast<uint8_t>(h.sync));
  w.put_u16(h.step);
  w.put_u32(h.offset);
  w.put_u32(h.count);
  std::memcpy(out.data(), w.bytes().data(), kCollectiveHeaderBytes);
  encode_values(h.sync, x, out.data() + kCollectiveHeaderBytes);
  return out;
}

void set_step(std::vector<uint8_t>* p, uint16_t step) {
  (*p)[2] = static_cast<uint8_t>(step);
  (*p)[3] = static_cast<uint8_t>(step >> 8);
}

std::string describe(const CHeader& h) {
  return std::string(op_name(h.op)) + " step " + std::to_string(h.step) + ", values " +
         std::to_string(h.offset) + "+" + std::to_string(h.count) + ", " + sync_type_name(h.sync);
}

// Checks that a received collective message is exactly the one this node expects;
// returns a pointer to its encoded values.
Expected<const uint8_t*> check_payload(const Message& m, const CHeader& want, const std::string& peer) {
  Reader r(m.payload, "all-reduce data from " + peer);
  uint8_t op = 0, sync = 0;
  CHeader got{};
  RETURN_IF_ERROR(r.get_u8(&op));
  RETURN_IF_ERROR(r.get_u8(&sync));
  RETURN_IF_ERROR(r.get_u16(&got.step));
  RETURN_IF_ERROR(r.get_u32(&got.offset));
  RETURN_IF_ERROR(r.get_u32(&got.count));
  got.op = static_cast<Op>(op);
  got.sync = static_cast<SyncType>(sync);
  if (op != uint8_t(want.op) || sync != uint8_t(want.sync) || got.step != want.step ||
      got.offset != want.offset || got.count != want.count) {
    const bool known = op <= uint8_t(Op::kRingAg) && sync <= uint8_t(SyncType::kF32);
    return Status::error(peer + " sent all-reduce data (" + (known ? describe(got) : "unknown op") +
                         ") where this node expected (" + describe(want) +
                         "): the nodes are out of step or configured differently", util::Status::Code::kProtocol);
  }
  if (r.remaining() != encoded_bytes(want.sync, want.count)) {
    return Status::error(peer + " sent all-reduce data of " + std::to_string(r.remaining()) +
                         " value bytes where " + std::to_string(encoded_bytes(want.sync, want.count)) +
                         " were expected", util::Status::Code::kProtocol);
  }
  return m.payload.data() + kCollectiveHeaderBytes;
}

uint64_t frame_bytes(SyncType t, size_t count) {
  return kHeaderBytes + kCollectiveHeaderBytes + encoded_bytes(t, count);
}
size_t chunk_len(size_t n, int n_nodes, int c) {
  auto [lo, hi] = ring_chunk(n, n_nodes, c);
  return hi - lo;
}
int mod(int a, int n) { return ((a % n) + n) % n; }

// Times a collective and adds its bytes to the stats.
class Accounting {
 public:
  Accounting(Transport& t, CollectiveStats* s) : t_(t), s_(s), before_(t.counters()) {}
  ~Accounting() {
    const ByteCounters after = t_.counters();
    s_->calls++;
    s_->seconds += timer_.seconds();
    s_->bytes_sent += after.bytes_sent - before_.bytes_sent;
    s_->bytes_received += after.bytes_received - before_.bytes_received;
  }

 private:
  Transport& t_;
  CollectiveStats* s_;
  ByteCounters before_;
  util::Timer timer_;
};

}  // namespace

const char* sync_type_name(SyncType t) {
  switch (t) {
    case SyncType::kQ8_0: return "q8_0";
    case SyncType::kF16: return "f16";
    case SyncType::kF32: return "f32";
  }
  return "?";
}
const char* algo_name(AllReduceAlgo a) {
  switch (a) {
    case AllReduceAlgo::kAllGather: return "all-gather";
    case AllReduceAlgo::kStar: return "star";
    case AllReduceAlgo::kRing: return "ring";
    case AllReduceAlgo::kMpi: return "mpi";
  }
  return "?";
}
std::optional<SyncType> sync_type_from_name(std::string_view s) {
  if (s == "q8_0" || s == "Q8_0") return SyncType::kQ8_0;
  if (s == "f16" || s == "F16") return SyncType::kF16;
  if (s == "f32" || s == "F32") return SyncType::kF32;
  return std::nullopt;
}
std::optional<AllReduceAlgo> algo_from_name(std::string_view s) {
  if (s == "all-gather" || s == "allgather") return AllReduceAlgo::kAllGather;
  if (s == "star") return AllReduceAlgo::kStar;
  if (s == "ring") return AllReduceAlgo::kRing;
  if (s == "mpi") return AllReduceAlgo::kMpi;
  return std::nullopt;
}

size_t encoded_bytes(SyncType t, size_t n) {
  switch (t) {
    case SyncType::kQ8_0: return (n + kBlock - 1) / kBlock * kQ8Bytes;
    case SyncType::kF16: return 2 * n;
    case SyncType::kF32: return 4 * n;
  }
  return 0;
}

// The block layouts written by tensor:: are little-endian on the wire only on a
// little-endian host; a big-endian host swaps the 16/32-bit fields after encoding.
namespace {
void swap_fields_if_big_endian(SyncType t, uint8_t* p, size_t n) {
  if constexpr (std::endian::native == std::endian::little) return;
  const size_t bytes = encoded_bytes(t, n);
  if (t == SyncType::kQ8_0) {
    for (size_t b = 0; b < bytes; b += kQ8Bytes) std::swap(p[b], p[b + 1]);
  } else if (t == SyncType::kF16) {
    for (size_t i = 0; i < bytes; i += 2) std::swap(p[i], p[i + 1]);
  } else {
    for (size_t i = 0; i < bytes; i += 4) { std::swap(p[i], p[i + 3]); std::swap(p[i + 1], p[i + 2]); }
  }
}
}  // namespace

void encode_values(SyncType t, std::span<const float> x, uint8_t* out) {
  const size_t n = x.size();
  if (t == SyncType::kF32) {
    if (n) std::memcpy(out, x.data(), 4 * n);
  } else if (t == SyncType::kF16) {
    if (n) tensor::quantize_row(tensor::Type::F16, x.data(), out, static_cast<int64_t>(n));
  } else {
    const size_t full = n / kBlock * kBlock;
    if (full) tensor::quantize_row(tensor::Type::Q8_0, x.data(), out, static_cast<int64_t>(full));
    if (full < n) {
      float tail[kBlock] = {0};
      std::copy(x.begin() + full, x.end(), tail);
      tensor::quantize_row(tensor::Type::Q8_0, tail, out + full / kBlock * kQ8Bytes, kBlock);
    }
  }
  swap_fields_if_big_endian(t, out, n);
}

void decode_values(SyncType t, const uint8_t* in, std::span<float> x) {
  const size_t n = x.size();
  std::vector<uint8_t> swapped;
  if constexpr (std::endian::native != std::endian::little) {
    swapped.assign(in, in + encoded_bytes(t, n));
    swap_fields_if_big_endian(t, swapped.data(), n);
    in = swapped.data();
  }
  if (t == SyncType::kF32) {
    if (n) std::memcpy(x.data(), in, 4 * n);
  } else if (t == SyncType::kF16) {
    if (n) tensor::dequantize_row(tensor::Type::F16, in, x.data(), static_cast<int64_t>(n));
  } else {
    const size_t full = n / kBlock * kBlock;
    if (full) tensor::dequantize_row(tensor::Type::Q8_0, in, x.data(), static_cast<int64_t>(full));
    if (full < n) {
      float tail[kBlock];
      tensor::dequantize_row(tensor::Type::Q8_0, in + full / kBlock * kQ8Bytes, tail, kBlock);
      std::copy(tail, tail + (n - full), x.begin() + full);
    }
  }
}

std::pair<size_t, size_t> ring_chunk(size_t n, int n_nodes, int c) {
  const size_t blocks = (n + kBlock - 1) / kBlock;
  const size_t b0 = blocks * size_t(c) / size_t(n_nodes);
  const size_t b1 = blocks * size_t(c + 1) / size_t(n_nodes);
  return {std::min(n, b0 * kBlock), std::min(n, b1 * kBlock)};
}

Status Collectives::all_reduce(std::span<float> x, AllReduceAlgo algo, SyncType sync) {
  if (t_.size() == 1) return {};
  CHECK_MSG(x.size() <= 0xffffffffu, "all_reduce of more than 2^32 values");
  Accounting acct(t_, &stats_);
  switch (algo) {
    case AllReduceAlgo::kAllGather: return all_gather_sum(x, sync);
    case AllReduceAlgo::kStar: return star(x, sync);
    case AllReduceAlgo::kRing: return ring(x, sync);
    case AllReduceAlgo::kMpi:
      if (sync == SyncType::kQ8_0) return Status::error("the mpi all-reduce sums f32 or f16, not q8_0");
      return t_.native_sum(x, sync == SyncType::kF16, opt_.timeout_s);
  }
  return Status::error("unknown all-reduce algorithm");
}

Status Collectives::send_to_all_receive_from_all(std::span<const uint8_t> mine, std::vector<Message>* msgs) {
  const int n_nodes = t_.size(), me = t_.rank();
  std::vector<SendItem> sends;
  std::vector<RecvItem> recvs;
  msgs->assign(n_nodes, Message{});
  for (int p = 0; p < n_nodes; ++p) {
    if (p == me) continue;
    sends.push_back({p, MessageType::kAllReduce, mine});
    recvs.push_back({p, MessageType::kAllReduce, &(*msgs)[p]});
  }
  return t_.exchange(sends, recvs, opt_.timeout_s);
}

Status Collectives::all_gather_sum(std::span<float> x, SyncType sync) {
  const int n_nodes = t_.size(), me = t_.rank();
  const CHeader h{Op::kAllGather, sync, 0, 0, static_cast<uint32_t>(x.size())};
  const std::vector<uint8_t> mine = make_payload(h, x);
  std::vector<Message> msgs;
  RETURN_IF_ERROR(send_to_all_receive_from_all(mine, &msgs));
  std::vector<const uint8_t*> enc(n_nodes);
  for (int p = 0; p < n_nodes; ++p) {
    if (p == me) { enc[p] = mine.data() + kCollectiveHeaderBytes; continue; }
    auto v = check_payload(msgs[p], h, t_.peer_name(p));
    if (!v.ok()) return v.status().at_rank(p);
    enc[p] = *v;
  }
  // Sum the decoded encodings in rank order 0..N-1, own contribution included.
  tmp_.resize(x.size());
  decode_values(sync, enc[0], x);
  for (int p = 1; p < n_nodes; ++p) {
    decode_values(sync, enc[p], tmp_);
    for (size_t i = 0; i < x.size(); ++i) x[i] = x[i] + tmp_[i];
  }
  return {};
}

Status Collectives::star(std::span<float> x, SyncType sync) {
  const int n_nodes = t_.size(), me = t_.rank();
  const uint32_t n = static_cast<uint32_t>(x.size());
  const CHeader up{Op::kStarUp, sync, 0, 0, n}, down{Op::kStarDown, sync, 0, 0, n};
  if (me != 0) {
    const std::vector<uint8_t> mine = make_payload(up, x);
    Message result;
    const SendItem s{0, MessageType::kAllReduce, mine};
    const RecvItem r{0, MessageType::kAllReduce, &result};
    RETURN_IF_ERROR(t_.exchange({&s, 1}, {&r, 1}, opt_.timeout_s));
    auto v = check_payload(result, down, t_.peer_name(0));
    if (!v.ok()) return v.status().at_rank(0);
    decode_values(sync, *v, x);
    return {};
  }
  std::vector<Message> msgs(n_nodes);
  std::vector<RecvItem> recvs;
  for (int p = 1; p < n_nodes; ++p) recvs.push_back({p, MessageType::kAllReduce, &msgs[p]});
  RETURN_IF_ERROR(t_.exchange({}, recvs, opt_.timeout_s));
  // Own partial through the same encoding as everyone else's, then rank order.
  const std::vector<uint8_t> mine = make_payload(up, x);
  tmp_.resize(x.size());
  decode_values(sync, mine.data() + kCollectiveHeaderBytes, x);
  for (int p = 1; p < n_nodes; ++p) {
    auto v = check_payload(msgs[p], up, t_.peer_name(p));
    if (!v.ok()) return v.status().at_rank(p);
    decode_values(sync, *v, tmp_);
    for (size_t i = 0; i < x.size(); ++i) x[i] = x[i] + tmp_[i];
  }
  const std::vector<uint8_t> result = make_payload(down, x);
  std::vector<SendItem> sends;
  for (int p = 1; p < n_nodes; ++p) sends.push_back({p, MessageType::kAllReduce, result});
  RETURN_IF_ERROR(t_.exchange(sends, {}, opt_.timeout_s));
  decode_values(sync, result.data() + kCollectiveHeaderBytes, x);  // what everyone decodes
  return {};
}

Status Collectives::ring(std::span<float> x, SyncType sync) {
  const int n_nodes = t_.size(), me = t_.rank();
  const int right = mod(me + 1, n_nodes), left = mod(me - 1, n_nodes);
  const size_t n = x.size();
  auto chunk = [&](int c) {
    auto [lo, hi] = ring_chunk(n, n_nodes, c);
    return x.subspan(lo, hi - lo);
  };
  auto header = [&](Op op, int step, int c) {
    auto [lo, hi] = ring_chunk(n, n_nodes, c);
    return CHeader{op, sync, static_cast<uint16_t>(step), static_cast<uint32_t>(lo), static_cast<uint32_t>(hi - lo)};
  };
  // Reduce-scatter: at step s send the running sum of chunk me-s-1, receive chunk me-s-2
  // and add our own values to it. After N-1 steps we hold the full sum of chunk me.
  Message in;
  for (int s = 0; s < n_nodes - 1; ++s) {
    const int sc = mod(me - s - 1, n_nodes), rc = mod(me - s - 2, n_nodes);
    const std::vector<uint8_t> out = make_payload(header(Op::kRingRs, s, sc), chunk(sc));
    const SendItem si{right, MessageType::kAllReduce, out};
    const RecvItem ri{left, MessageType::kAllReduce, &in};
    RETURN_IF_ERROR(t_.exchange({&si, 1}, {&ri, 1}, opt_.timeout_s));
    auto v = check_payload(in, header(Op::kRingRs, s, rc), t_.peer_name(left));
    if (!v.ok()) return v.status().at_rank(left);
    std::span<float> dst = chunk(rc);
    tmp_.resize(dst.size());
    decode_values(sync, *v, tmp_);
    for (size_t i = 0; i < dst.size(); ++i) dst[i] = tmp_[i] + dst[i];
  }
  // The owner encodes its chunk once; those bytes go round unchanged and everyone, the
  // owner included, decodes them.
  std::vector<uint8_t> fwd = make_payload(header(Op::kRingAg, 0, me), chunk(me));
  decode_values(sync, fwd.data() + kCollectiveHeaderBytes, chunk(me));
  for (int s = 0; s < n_nodes - 1; ++s) {
    const int rc = mod(me - s - 1, n_nodes);
    set_step(&fwd, static_cast<uint16_t>(s));
    const SendItem si{right, MessageType::kAllReduce, fwd};
    const RecvItem ri{left, MessageType::kAllReduce, &in};
    RETURN_IF_ERROR(t_.exchange({&si, 1}, {&ri, 1}, opt_.timeout_s));
    auto v = check_payload(in, header(Op::kRingAg, s, rc), t_.peer_name(left));
    if (!v.ok()) return v.status().at_rank(left);
    decode_values(sync, *v, chunk(rc));
    fwd = std::move(in.payload);
  }
  return {};
}

Status Collectives::all_gather_rows(uint8_t* buf, size_t n_rows, size_t row_bytes, size_t offset, size_t len) {
  const int n_nodes = t_.size(), me = t_.rank();
  CHECK(offset + len <= row_bytes && row_bytes <= 0xffffffffu);
  if (n_nodes == 1) return {};
  Accounting acct(t_, &stats_);
  // Header (op, sync unused, step 0, byte offset, byte length), then the segments row by row.
  Writer w;
  w.put_u8(static_cast<uint8_t>(Op::kGatherRows));
  w.put_u8(0);
  w.put_u16(0);
  w.put_u32(static_cast<uint32_t>(offset));
  w.put_u32(static_cast<uint32_t>(len));
  std::vector<uint8_t> mine = w.take();
  mine.resize(kCollectiveHeaderBytes + n_rows * len);
  for (size_t r = 0; r < n_rows; ++r)
    std::memcpy(mine.data() + kCollectiveHeaderBytes + r * len, buf + r * row_bytes + offset, len);
  std::vector<Message> msgs;
  RETURN_IF_ERROR(send_to_all_receive_from_all(mine, &msgs));
  std::vector<std::pair<size_t, size_t>> segs{{offset, len}};
  for (int p = 0; p < n_nodes; ++p) {
    if (p == me) continue;
    const std::string peer = t_.peer_name(p);
    Reader r(msgs[p].payload, "row gather data from " + peer);
    uint8_t op = 0, unused = 0;
    uint16_t step = 0;
    uint32_t off = 0, n = 0;
    RETURN_IF_ERROR(r.get_u8(&op).at_rank(p));
    RETURN_IF_ERROR(r.get_u8(&unused).at_rank(p));
    RETURN_IF_ERROR(r.get_u16(&step).at_rank(p));
    RETURN_IF_ERROR(r.get_u32(&off).at_rank(p));
    RETURN_IF_ERROR(r.get_u32(&n).at_rank(p));
    if (op != uint8_t(Op::kGatherRows))
      return Status::error(peer + " sent other collective data where this node expected a row gather: the nodes "
                           "are out of step or configured differently (--sync-type must match)", util::Status::Code::kProtocol, p);
    if (size_t(off) + n > row_bytes || r.remaining() != n_rows * size_t(n))
      return Status::error(peer + " sent a row gather segment [" + std::to_string(off) + ", +" + std::to_string(n) +
                           ") x " + std::to_string(r.remaining()) + " bytes that does not fit " +
                           std::to_string(n_rows) + " rows of " + std::to_string(row_bytes) + " bytes", util::Status::Code::kProtocol, p);
    const uint8_t* src = msgs[p].payload.data() + kCollectiveHeaderBytes;
    for (size_t row = 0; row < n_rows; ++row) std::memcpy(buf + row * row_bytes + off, src + row * n, n);
    segs.emplace_back(off, n);
  }
  std::sort(segs.begin(), segs.end());
  size_t end = 0;
  for (const auto& [off, n] : segs) {
    if (off != end)
      return Status::error("the nodes' row gather segments do not tile the row (gap or overlap at byte " +
                           std::to_string(std::min(off, end)) + "): the nodes hold inconsistent slices");
    end = off + n;
  }
  if (end != row_bytes)
    return Status::error("the nodes' row gather segments cover " + std::to_string(end) + " of " +
                         std::to_string(row_bytes) + " bytes: the nodes hold inconsistent slices");
  return {};
}

Status Collectives::broadcast(int root, std::vector<uint8_t>* blob) {
  const int n_nodes = t_.size(), me = t_.rank();
  CHECK(root >= 0 && root < n_nodes);
  if (n_nodes == 1) return {};
  Accounting acct(t_, &stats_);
  if (me == root) {
    std::vector<SendItem> sends;
    for (int p = 0; p < n_nodes; ++p)
      if (p != me) sends.push_back({p, MessageType::kBroadcast, *blob});
    return t_.exchange(sends, {}, opt_.timeout_s);
  }
  auto m = t_.recv_expect(root, MessageType::kBroadcast, opt_.timeout_s);
  if (!m.ok()) return m.status();
  *blob = std::move(m->payload);
  return {};
}

Expected<std::vector<std::vector<uint8_t>>> Collectives::gather(int root, std::span<const uint8_t> blob) {
  const int n_nodes = t_.size(), me = t_.rank();
  CHECK(root >= 0 && root < n_nodes);
  std::vector<std::vector<uint8_t>> out;
  if (me != root) {
    Accounting acct(t_, &stats_);
    RETURN_IF_ERROR(t_.send(root, MessageType::kGather, blob, opt_.timeout_s));
    return out;
  }
  out.resize(n_nodes);
  out[me].assign(blob.begin(), blob.end());
  if (n_nodes == 1) return out;
  Accounting acct(t_, &stats_);
  std::vector<Message> msgs(n_nodes);
  std::vector<RecvItem> recvs;
  for (int p = 0; p < n_nodes; ++p)
    if (p != me) recvs.push_back({p, MessageType::kGather, &msgs[p]});
  RETURN_IF_ERROR(t_.exchange({}, recvs, opt_.timeout_s));
  for (int p = 0; p < n_nodes; ++p)
    if (p != me) out[p] = std::move(msgs[p].payload);
  return out;
}

uint64_t Collectives::all_reduce_bytes_sent(AllReduceAlgo a, SyncType t, int n_nodes, int rank, size_t n) {
  if (n_nodes == 1) return 0;
  switch (a) {
    case AllReduceAlgo::kAllGather: return uint64_t(n_nodes - 1) * frame_bytes(t, n);
    case AllReduceAlgo::kStar: return (rank == 0 ? uint64_t(n_nodes - 1) : 1) * frame_bytes(t, n);
    case AllReduceAlgo::kRing: {
      uint64_t sum = 0;  // reduce-scatter sends every chunk but ours, all-gather every chunk but right's
      for (int c = 0; c < n_nodes; ++c) {
        if (c != rank) sum += frame_bytes(t, chunk_len(n, n_nodes, c));
        if (c != mod(rank + 1, n_nodes)) sum += frame_bytes(t, chunk_len(n, n_nodes, c));
      }
      return sum;
    }
    case AllReduceAlgo::kMpi: return encoded_bytes(t, n);
  }
  return 0;
}

uint64_t Collectives::all_reduce_bytes_received(AllReduceAlgo a, SyncType t, int n_nodes, int rank, size_t n) {
  if (n_nodes == 1) return 0;
  if (a != AllReduceAlgo::kRing) return all_reduce_bytes_sent(a, t, n_nodes, rank, n);
  uint64_t sum = 0;  // reduce-scatter receives every chunk but left's, all-gather every chunk but ours
  for (int c = 0; c < n_nodes; ++c) {
    if (c != mod(rank - 1, n_nodes)) sum += frame_bytes(t, chunk_len(n, n_nodes, c));
    if (c != rank) sum += frame_bytes(t, chunk_len(n, n_nodes, c));
  }
  return sum;
}

}  // namespace net
