// protocol.cc: each session message's wire form (Wire<M>: its name, its one field list run by
// both the encoder and the parser, wire_fields.h, and the checks a parsed message must pass
// as a whole), and encode_message / parse_message over it.
#include "runtime/protocol.h"

#include <cmath>
#include <cstring>

#include "runtime/wire_fields.h"

namespace runtime {

namespace {

using util::Status;
using wire::In;
using wire::Out;

// A token mask: 0 none; 1 the bitmap (u32 words, u64 each); 2 alternating run lengths
// (u32 count, u32 each), the first of tokens not allowed, which is shorter for the masks
// grammars make (a few allowed tokens, or all but a few). The one field with two
// encodings, written and read here rather than by a field list.
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

Status mask_field(Out& io, const std::vector<uint64_t>& m) {
  put_mask(io.writer(), m);
  return util::ok_status();
}
Status mask_field(In& io, std::vector<uint64_t>& m) { return get_mask(io.reader(), &m, io.what()); }

// --- Parts of messages: field lists that messages include ------------------------------------

template <class IO, class C>
Status config_fields(IO& io, C& c) {
  RETURN_IF_ERROR(io.enum8(c.arch, model::Arch::kGptOss, "names an unknown architecture"));
  RETURN_IF_ERROR(io.str(c.arch_name, 256));
  RETURN_IF_ERROR(io.str(c.name, 4096));
  RETURN_IF_ERROR(io.i32(c.dim, c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim, c.n_ff, c.n_vocab, c.n_rot,
                         c.ctx_train));
  RETURN_IF_ERROR(io.f32(c.rms_eps, c.rope_base, c.rope_freq_scale));
  RETURN_IF_ERROR(io.boolean(c.rope_neox, c.qkv_bias, c.qk_norm));
  RETURN_IF_ERROR(io.bits("has unknown model flags", c.act, c.post_norms));  // gemma3's (model/config.h)
  RETURN_IF_ERROR(io.i32(c.n_swa, c.swa_pattern));
  RETURN_IF_ERROR(io.f32(c.embed_scale, c.q_scale, c.logit_softcap, c.rope_base_swa));
  RETURN_IF_ERROR(io.i32(c.n_expert, c.n_expert_used));  // qwen3moe's (v8)
  RETURN_IF_ERROR(io.boolean(c.expert_norm));
  RETURN_IF_ERROR(io.f32(c.expert_scale));
  RETURN_IF_ERROR(io.boolean(c.gpt_oss));  // v10: gpt-oss and YaRN
  RETURN_IF_ERROR(io.f32(c.yarn.ext_factor, c.yarn.attn_factor, c.yarn.beta_fast, c.yarn.beta_slow));
  return io.i32(c.yarn.n_ctx_orig);
}

// What a step's segment must be, beyond what its fields can carry.
bool segment_ok(const StepSegment& g) {
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

template <class IO, class G>
Status segment_fields(IO& io, G& g) {
  RETURN_IF_ERROR(io.i32(g.slot, g.pos, g.n));
  RETURN_IF_ERROR(io.packed(g.want, 0x3f, g.rowwise, g.every_row));  // want | rowwise 0x80 | every_row 0x40
  RETURN_IF_ERROR(io.i32(g.k));
  RETURN_IF_ERROR(io.f32(g.repeat_penalty, g.presence_penalty, g.frequency_penalty));
  RETURN_IF_ERROR(io.list(g.penalties, 4, "lists more penalty rows than it carries", [](auto& io, auto& row) {
    return io.list(row, 8, "lists more penalties than it carries",
                   [](auto& io, auto& p) { return io.i32(p.first, p.second); });
  }));
  RETURN_IF_ERROR(io.list(g.logit_bias, 8, "lists more logit biases than it carries", [](auto& io, auto& b) {
    RETURN_IF_ERROR(io.i32(b.first));
    RETURN_IF_ERROR(io.f32(b.second));
    return io.check(std::isfinite(b.second), "has a logit bias that is not finite");
  }));
  RETURN_IF_ERROR(mask_field(io, g.allowed));
  RETURN_IF_ERROR(
      io.list(g.targets, 4, "lists more targets than it carries", [](auto& io, auto& t) { return io.i32(t); }));
  RETURN_IF_ERROR(io.i32(g.blocks_from));
  RETURN_IF_ERROR(
      io.list(g.blocks, 4, "lists more KV blocks than it carries", [](auto& io, auto& b) { return io.i32(b); }));
  return io.check(segment_ok(g), "is malformed");
}

// --- The messages. Wire<M>: kName (errors say "<name> from <peer> ..."), fields (the field
// list in wire order, for Out and In alike) and, where the fields alone cannot say it,
// whole (what a parsed message must be as a whole) ---------------------------------------

template <class M>
struct Wire;

template <>
struct Wire<Setup> {
  static constexpr const char* kName = "session setup";
  static Status fields(auto& io, auto& s) {
    RETURN_IF_ERROR(io.str(s.model_hash, 128));
    RETURN_IF_ERROR(config_fields(io, s.config));
    RETURN_IF_ERROR(io.range(s.slice.heads, s.slice.kv_heads, s.slice.ff, s.slice.vocab));
    RETURN_IF_ERROR(io.bits("has unknown slice flags", s.slice.exact, s.slice.gather_q8_att, s.slice.gather_q8_ff));
    RETURN_IF_ERROR(io.range(s.slice.rows));
    RETURN_IF_ERROR(io.enum8(s.sync, net::SyncType::kF32, "names an unknown sync type"));
    RETURN_IF_ERROR(io.i8(s.forced_algo, int8_t(net::AllReduceAlgo::kMpi), "names an unknown algorithm"));
    RETURN_IF_ERROR(io.f64(s.alpha_us, s.beta_gbps));
    RETURN_IF_ERROR(model::run_config_fields(io, s.run));
    RETURN_IF_ERROR(io.f64(s.step_timeout_s));
    return io.u64(s.slice_bytes);
  }
  // Whether the shape and slice are possible.
  static Status whole(const Setup& s, const std::string& what) {
    const model::Config& c = s.config;
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
      return Status::error(what + " has an inconsistent shape or slice");
    return util::ok_status();
  }
};

template <>
struct Wire<TensorChunk> {
  static constexpr const char* kName = "weight chunk";
  static Status fields(auto& io, auto& c) {
    RETURN_IF_ERROR(io.str(c.name, 256));
    RETURN_IF_ERROR(io.type(c.type));
    RETURN_IF_ERROR(io.u64(c.rows, c.cols, c.total_bytes, c.offset));
    return io.bytes(c.bytes);
  }
  static Status whole(const TensorChunk& c, const std::string& what) {
    const uint64_t n = c.bytes.size();
    const auto& tr = tensor::traits(c.type);
    if (c.rows > (uint64_t(1) << 32) || c.cols > (uint64_t(1) << 32) || c.cols % tr.block_size != 0 ||
        c.total_bytes != c.rows * tensor::row_bytes(c.type, int64_t(c.cols)) || c.offset > c.total_bytes ||
        n > c.total_bytes - c.offset)
      return Status::error(what + ": tensor '" + c.name + "' has inconsistent sizes");
    return util::ok_status();
  }
};

template <>
struct Wire<Step> {
  static constexpr const char* kName = "step";
  static Status fields(auto& io, auto& s) {
    RETURN_IF_ERROR(io.type(s.embd_type));
    RETURN_IF_ERROR(io.bytes(s.rows));
    RETURN_IF_ERROR(io.list(s.segs, 42, "lists a bad number of segments",
                            [](auto& io, auto& g) { return segment_fields(io, g); }, true));
    return io.list(s.kv_copies, 9, "lists more KV copies than it carries", [](auto& io, auto& c) {  // v13
      RETURN_IF_ERROR(io.enum8(c.kind, model::KvCopy::Kind::kForget, "names an unknown KV copy"));
      RETURN_IF_ERROR(io.i32(c.block, c.entry));
      return io.check(c.block >= 0 && c.entry >= 0, "has a KV copy with a negative block or entry");
    });
  }
};

template <>
struct Wire<StepReply> {
  static constexpr const char* kName = "step reply";
  static Status fields(auto& io, auto& rep) {
    RETURN_IF_ERROR(io.list(rep.sampled, 8, "lists more sampled segments than it carries", [](auto& io, auto& sc) {
      RETURN_IF_ERROR(io.list(sc.cand, 8, "lists more candidates than it carries", [](auto& io, auto& c) {
        RETURN_IF_ERROR(io.i32(c.id));
        return io.f32(c.logit);
      }));
      return io.f32(sc.lse);
    }));
    RETURN_IF_ERROR(io.list(rep.scores, 17, "lists more row scores than it carries", [](auto& io, auto& x) {
      RETURN_IF_ERROR(io.f32(x.max));
      RETURN_IF_ERROR(io.f64(x.sum));
      RETURN_IF_ERROR(io.f32(x.target));
      return io.boolean(x.owns);
    }));
    RETURN_IF_ERROR(io.u64(rep.counters.bytes_sent, rep.counters.bytes_received));
    RETURN_IF_ERROR(io.f64(rep.counters.compute_s, rep.counters.sync_s));
    return io.u64(rep.counters.steps, rep.counters.rows);
  }
};

template <>
struct Wire<SpeedProbe> {
  static constexpr const char* kName = "speed probe";
  static Status fields(auto& io, auto& p) {
    RETURN_IF_ERROR(io.bits("has a bad flag", p.measure));
    RETURN_IF_ERROR(io.i32(p.shape.dim, p.shape.n_heads, p.shape.n_kv_heads, p.shape.head_dim, p.shape.n_ff));
    return io.type(p.shape.type);
  }
  static Status whole(const SpeedProbe& p, const std::string& what) {
    const ProbeShape& sh = p.shape;
    constexpr int kMax = 1 << 20;  // no model is this wide
    const auto ok = [](int v) { return v > 0 && v <= kMax; };
    if (!ok(sh.dim) || !ok(sh.n_heads) || !ok(sh.n_kv_heads) || !ok(sh.head_dim) || !ok(sh.n_ff) ||
        sh.n_heads % sh.n_kv_heads != 0 || sh.dim % tensor::traits(sh.type).block_size != 0)
      return Status::error(what + " has an inconsistent shape");
    return util::ok_status();
  }
};

template <>
struct Wire<SpeedReply> {
  static constexpr const char* kName = "speed reply";
  static Status fields(auto& io, auto& rep) {
    RETURN_IF_ERROR(io.str(rep.device, 1024));
    return io.f64(rep.tokens_per_s);
  }
  static Status whole(const SpeedReply& rep, const std::string& what) {
    if (!(rep.tokens_per_s >= 0) || !std::isfinite(rep.tokens_per_s))
      return Status::error(what + " gives a speed that is not a non-negative number");
    return util::ok_status();
  }
};

}  // namespace

template <class M>
std::vector<uint8_t> encode_message(const M& m) {
  Out io;
  (void)Wire<M>::fields(io, m);
  return io.take();
}

template <class M>
util::Expected<M> parse_message(std::span<const uint8_t> p, const std::string& peer) {
  const std::string what = std::string(Wire<M>::kName) + " from " + peer;
  In io(p, what);
  M m;
  RETURN_IF_ERROR(Wire<M>::fields(io, m));
  RETURN_IF_ERROR(io.finish());  // the whole payload, nothing after it
  if constexpr (requires { Wire<M>::whole(m, what); }) RETURN_IF_ERROR(Wire<M>::whole(m, what));
  return m;
}

// The two for every message with a Wire<M> above.
#define SHARDLM_MESSAGE_CODEC(M)                           \
  template std::vector<uint8_t> encode_message(const M&); \
  template util::Expected<M> parse_message(std::span<const uint8_t>, const std::string&);
SHARDLM_MESSAGE_CODEC(Setup) SHARDLM_MESSAGE_CODEC(TensorChunk) SHARDLM_MESSAGE_CODEC(Step)
SHARDLM_MESSAGE_CODEC(StepReply) SHARDLM_MESSAGE_CODEC(SpeedProbe) SHARDLM_MESSAGE_CODEC(SpeedReply)
#undef SHARDLM_MESSAGE_CODEC

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
