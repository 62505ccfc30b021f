// protocol.cc: encode_message / parse_message over each session message's field list
// (M::fields in protocol.h, run by wire_fields.h's Out and In), the token mask's two
// encodings, and the whole-message conditions the lists end with.
#include "runtime/protocol.h"

#include <cmath>
#include <cstring>

#include "runtime/wire_fields.h"

namespace runtime {

using util::Status;
using wire::In;
using wire::Out;

template <class M>
std::vector<uint8_t> encode_message(const M& m) {
  Out io;
  (void)M::fields(io, m);
  return io.take();
}

template <class M>
util::Expected<M> parse_message(std::span<const uint8_t> p, const std::string& peer) {
  In io(p, std::string(M::kName) + " from " + peer);
  M m;
  RETURN_IF_ERROR(M::fields(io, m));
  RETURN_IF_ERROR(io.finish());  // the whole payload, nothing after it
  return m;
}

// The two for every message.
#define SHARDLM_MESSAGE_CODEC(M)                           \
  template std::vector<uint8_t> encode_message(const M&); \
  template util::Expected<M> parse_message(std::span<const uint8_t>, const std::string&);
SHARDLM_MESSAGE_CODEC(Setup) SHARDLM_MESSAGE_CODEC(TensorChunk) SHARDLM_MESSAGE_CODEC(Step)
SHARDLM_MESSAGE_CODEC(StepReply) SHARDLM_MESSAGE_CODEC(SpeedProbe) SHARDLM_MESSAGE_CODEC(SpeedReply)
#undef SHARDLM_MESSAGE_CODEC

// --- What messages must be as a whole (the field lists end with these) ----------------------

bool Setup::consistent() const {
  const model::Config& c = config;
  const Setup& s = *this;
  const auto ok_range = [](const plan::Range& x, int hi) { return x.begin >= 0 && x.begin < x.end && x.end <= hi; };
  // A node without query heads (more nodes than heads) has no KV heads either.
  const auto ok_heads = [&](const plan::Range& h, const plan::Range& kv) {
    return h.size() == 0 ? kv.size() == 0 && h.begin >= 0 && h.begin <= c.n_heads && kv.begin >= 0 &&
                               kv.begin <= c.n_kv_heads
                         : ok_range(h, c.n_heads) && ok_range(kv, c.n_kv_heads);
  };
  if (c.dim <= 0 || c.n_layers <= 0 || c.n_heads <= 0 || c.n_kv_heads <= 0 || c.n_heads % c.n_kv_heads != 0 ||
      c.head_dim <= 0 || c.n_ff <= 0 || c.n_vocab <= 0 || c.n_rot < 0 || c.n_rot > c.head_dim ||
      c.n_expert < 0 || c.n_expert > model::kMaxExperts || c.n_expert_used < 0 || c.n_expert_used > c.n_expert ||
      (c.n_expert > 0 && c.n_expert_used == 0) ||
      !ok_heads(s.slice.heads, s.slice.kv_heads) ||
      !ok_range(s.slice.ff, c.n_ff) || !ok_range(s.slice.vocab, c.n_vocab) ||
      (s.slice.exact && !ok_range(s.slice.rows, c.dim)) || s.run.ctx <= 0 || s.run.max_batch <= 0 ||
      s.run.max_batch > kMaxStepRows || s.run.n_slots <= 0 || s.run.n_slots > kMaxSlots || s.run.kv_blocks < 0 ||
      s.run.kv_host_blocks < 0 ||
      !(s.step_timeout_s > 0) || !(s.beta_gbps > 0))
    return false;
  return true;
}

bool TensorChunk::sizes_ok() const {
  const uint64_t n = bytes.size();
  const auto& tr = tensor::traits(type);
  return rows <= (uint64_t(1) << 32) && cols <= (uint64_t(1) << 32) && cols % tr.block_size == 0 &&
         total_bytes == rows * tensor::row_bytes(type, int64_t(cols)) && offset <= total_bytes &&
         n <= total_bytes - offset;
}

bool StepSegment::well_formed() const {
  const StepSegment& g = *this;
  const uint8_t want = uint8_t(g.want);
  const size_t sampled = want != 1 ? 0 : g.every_row ? size_t(g.n) : 1;
  const bool blocks_ok = g.blocks_from < 0
                             ? g.blocks.empty()
                             : g.pos >= 0 && g.n > 0 && g.blocks_from <= g.pos / model::kKvBlockRows &&
                                   int64_t(g.blocks_from) + int64_t(g.blocks.size()) ==
                                       (int64_t(g.pos) + g.n + model::kKvBlockRows - 1) / model::kKvBlockRows;
  return blocks_ok && !(g.slot < 0 || g.pos < 0 || g.n <= 0 || want > 2 || g.k < 1 ||
           (want == 2 && g.targets.size() != size_t(g.n)) || (g.every_row && want != 1) ||
           (want == 1 && g.penalties.size() != sampled) || (!g.allowed.empty() && (want != 1 || g.every_row)));
}

bool SpeedProbe::shape_ok() const {
  const ProbeShape& sh = shape;
  constexpr int kMax = 1 << 20;  // no model is this wide
  const auto ok = [](int v) { return v > 0 && v <= kMax; };
  return ok(sh.dim) && ok(sh.n_heads) && ok(sh.n_kv_heads) && ok(sh.head_dim) && ok(sh.n_ff) &&
         sh.n_heads % sh.n_kv_heads == 0 && sh.dim % tensor::traits(sh.type).block_size == 0;
}

// --- The token mask: 0 none; 1 the bitmap (u32 words, u64 each); 2 alternating run lengths
// (u32 count, u32 each), the first of tokens not allowed, which is shorter for the masks
// grammars make (a few allowed tokens, or all but a few) -----------------------------------

namespace {

void put_mask(net::Writer& w, const std::vector<uint64_t>& m) {
  if (m.empty()) return w.put_u8(0);
  std::vector<uint32_t> runs;
  bool cur = false;
  uint32_t len = 0;
  for (size_t i = 0; i < m.size() * 64; ++i) {
    const bool bit = (m[i / 64] >> (i % 64)) & 1;
    if (bit != cur) {
      runs.push_back(len);
      cur = bit;
      len = 0;
    }
    ++len;
  }
  runs.push_back(len);
  if (runs.size() * 4 < m.size() * 8) {
    w.put_u8(2);
    w.put_u32(uint32_t(runs.size()));
    for (uint32_t r : runs) w.put_u32(r);
  } else {
    w.put_u8(1);
    w.put_u32(uint32_t(m.size()));
    for (uint64_t x : m) w.put_u64(x);
  }
}

Status get_mask(net::Reader& r, std::vector<uint64_t>* m, const std::string& what) {
  uint8_t kind = 0;
  uint32_t n = 0;
  RETURN_IF_ERROR(r.get_u8(&kind));
  if (kind == 0) return util::ok_status();
  RETURN_IF_ERROR(r.get_u32(&n));
  if (kind == 1) {
    if (n == 0 || n > r.remaining() / 8) return Status::error(what + " has a token mask longer than it carries");
    m->resize(n);
    for (uint64_t& x : *m) RETURN_IF_ERROR(r.get_u64(&x));
    return util::ok_status();
  }
  if (kind != 2 || n == 0 || n > r.remaining() / 4) return Status::error(what + " has a malformed token mask");
  std::vector<uint32_t> runs(n);
  uint64_t total = 0;
  for (uint32_t& x : runs) {
    RETURN_IF_ERROR(r.get_u32(&x));
    total += x;
  }
  if (total == 0 || total > (uint64_t(1) << 26)) return Status::error(what + " has a token mask of a bad length");
  m->assign(size_t((total + 63) / 64), 0);
  uint64_t i = 0;
  for (size_t k = 0; k < runs.size(); ++k) {
    if (k % 2)
      for (uint64_t j = i; j < i + runs[k]; ++j) (*m)[j / 64] |= uint64_t(1) << (j % 64);
    i += runs[k];
  }
  return util::ok_status();
}

}  // namespace

Status StepSegment::mask_field(Out& io, const std::vector<uint64_t>& m) {
  put_mask(io.writer(), m);
  return util::ok_status();
}

Status StepSegment::mask_field(In& io, std::vector<uint64_t>& m) { return get_mask(io.reader(), &m, io.what()); }

std::string Setup::slice_key() const {
  const plan::NodeSlice& s = slice;
  return model_hash + "/h" + std::to_string(s.heads.begin) + "-" + std::to_string(s.heads.end) + "/kv" +
         std::to_string(s.kv_heads.begin) + "-" + std::to_string(s.kv_heads.end) + "/ff" +
         std::to_string(s.ff.begin) + "-" + std::to_string(s.ff.end) + "/v" + std::to_string(s.vocab.begin) + "-" +
         std::to_string(s.vocab.end) + (s.exact ? "/exact" + std::to_string(s.rows.begin) + "-" +
                                                      std::to_string(s.rows.end) : "");
}

int Step::rows_total() const {
  int64_t n = 0;
  for (const StepSegment& g : segs) n += g.n;
  return n > kMaxStepRows ? kMaxStepRows + 1 : int(n);
}

StepFit step_fit(const std::vector<StepSegment>& segs, int rows, int ctx, int n_slots, int max_rows) {
  if (rows > max_rows) return StepFit::kRows;
  for (size_t i = 0; i < segs.size(); ++i) {
    const StepSegment& g = segs[i];
    if (g.slot < 0 || g.slot >= n_slots || int64_t(g.pos) + g.n > ctx) return StepFit::kSlotOrContext;
    for (size_t j = 0; j < i; ++j)
      if (segs[j].slot == g.slot) return StepFit::kSlotTwice;
  }
  return StepFit::kFits;
}

Status check_step_fits(const Step& s, int dim, int ctx, int n_slots, int max_rows, const std::string& peer,
                       int kv_blocks) {
  if (kv_blocks <= 0) kv_blocks = n_slots * model::kv_blocks_for(ctx);
  for (const StepSegment& g : s.segs)
    for (int32_t b : g.blocks)
      if (b < 0 || b >= kv_blocks) return Status::error("step from " + peer + " names a KV block outside the pool");
  for (const model::KvCopy& c : s.kv_copies)
    if (c.block >= kv_blocks) return Status::error("step from " + peer + " names a KV block outside the pool");
  const int rows = s.rows_total();
  if (dim % tensor::traits(s.embd_type).block_size != 0 ||  // before row_bytes, which CHECKs it
      s.rows.size() != tensor::row_bytes(s.embd_type, dim) * uint64_t(rows))
    return Status::error("step from " + peer + " does not fit (rows)");
  switch (step_fit(s.segs, rows, ctx, n_slots, max_rows)) {
    case StepFit::kFits: return util::ok_status();
    case StepFit::kRows: return Status::error("step from " + peer + " does not fit (rows)");
    case StepFit::kSlotOrContext: return Status::error("step from " + peer + " does not fit (slot or context)");
    case StepFit::kSlotTwice: return Status::error("step from " + peer + " names a slot twice");
  }
  return util::ok_status();
}

std::vector<uint8_t> encode_u64(uint64_t v) {
  net::Writer w;
  w.put_u64(v);
  return w.take();
}

util::Expected<uint64_t> parse_u64(std::span<const uint8_t> p, const std::string& what) {
  net::Reader r(p, what);
  uint64_t v = 0;
  RETURN_IF_ERROR(r.get_u64(&v));
  RETURN_IF_ERROR(r.finish());
  return v;
}

}  // namespace runtime
