// protocol.cc: explicit little-endian encoding and checked parsing of the session messages.
#include "runtime/protocol.h"

#include <cmath>
#include <cstring>

namespace runtime {

namespace {

using util::Status;

void put_f64(net::Writer& w, double v) {
  uint64_t u;
  std::memcpy(&u, &v, 8);
  w.put_u64(u);
}
Status get_f64(net::Reader& r, double* v) {
  uint64_t u = 0;
  RETURN_IF_ERROR(r.get_u64(&u));
  std::memcpy(v, &u, 8);
  return util::ok_status();
}
void put_range(net::Writer& w, const plan::Range& r) {
  w.put_i32(r.begin);
  w.put_i32(r.end);
}
Status get_range(net::Reader& r, plan::Range* out) {
  RETURN_IF_ERROR(r.get_i32(&out->begin));
  RETURN_IF_ERROR(r.get_i32(&out->end));
  return util::ok_status();
}
Status get_int(net::Reader& r, int* v) {
  int32_t x = 0;
  RETURN_IF_ERROR(r.get_i32(&x));
  *v = x;
  return util::ok_status();
}
Status get_bool(net::Reader& r, bool* v) {
  uint8_t x = 0;
  RETURN_IF_ERROR(r.get_u8(&x));
  *v = x != 0;
  return util::ok_status();
}
Status get_type(net::Reader& r, tensor::Type* t, const std::string& what) {
  uint32_t id = 0;
  RETURN_IF_ERROR(r.get_u32(&id));
  auto tr = tensor::type_traits(id);
  if (!tr || !tr->supported) return Status::error(what + " names unknown tensor type " + std::to_string(id));
  *t = tensor::Type(id);
  return util::ok_status();
}

// Whether a parsed setup's shape and slice are possible.
bool consistent(const Setup& s) {
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
      (s.slice.exact && !ok_range(s.slice.rows, c.dim)) || s.ctx <= 0 || s.batch <= 0 || s.batch > kMaxStepRows ||
      s.n_slots <= 0 || s.n_slots > kMaxSlots ||
      !(s.step_timeout_s > 0) || !(s.beta_gbps > 0))
    return false;
  return true;
}

}  // namespace

std::string Setup::slice_key() const {
  const plan::NodeSlice& s = slice;
  return model_hash + "/h" + std::to_string(s.heads.begin) + "-" + std::to_string(s.heads.end) + "/kv" +
         std::to_string(s.kv_heads.begin) + "-" + std::to_string(s.kv_heads.end) + "/ff" +
         std::to_string(s.ff.begin) + "-" + std::to_string(s.ff.end) + "/v" + std::to_string(s.vocab.begin) + "-" +
         std::to_string(s.vocab.end) + (s.exact ? "/exact" + std::to_string(s.rows.begin) + "-" +
                                                      std::to_string(s.rows.end) : "");
}

std::vector<uint8_t> encode_setup(const Setup& s) {
  net::Writer w;
  w.put_string(s.model_hash);
  const model::Config& c = s.config;
  w.put_u8(uint8_t(c.arch));
  w.put_string(c.arch_name);
  w.put_string(c.name);
  for (int v : {c.dim, c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim, c.n_ff, c.n_vocab, c.n_rot, c.ctx_train})
    w.put_i32(v);
  w.put_f32(c.rms_eps);
  w.put_f32(c.rope_base);
  w.put_f32(c.rope_freq_scale);
  w.put_u8(c.rope_neox);
  w.put_u8(c.qkv_bias);
  w.put_u8(c.qk_norm);
  w.put_u8(uint8_t(c.act) | uint8_t(c.post_norms) << 1);  // gemma3's fields (model/config.h)
  for (int v : {c.n_swa, c.swa_pattern}) w.put_i32(v);
  for (float v : {c.embed_scale, c.q_scale, c.logit_softcap, c.rope_base_swa}) w.put_f32(v);
  for (int v : {c.n_expert, c.n_expert_used}) w.put_i32(v);  // qwen3moe's fields (v8)
  w.put_u8(c.expert_norm);
  w.put_f32(c.expert_scale);
  w.put_u8(c.gpt_oss);  // v10: gpt-oss and YaRN
  for (float v : {c.yarn.ext_factor, c.yarn.attn_factor, c.yarn.beta_fast, c.yarn.beta_slow}) w.put_f32(v);
  w.put_i32(c.yarn.n_ctx_orig);
  put_range(w, s.slice.heads);
  put_range(w, s.slice.kv_heads);
  put_range(w, s.slice.ff);
  put_range(w, s.slice.vocab);
  w.put_u8(uint8_t(s.slice.exact) | uint8_t(s.slice.gather_q8_att) << 1 | uint8_t(s.slice.gather_q8_ff) << 2);
  put_range(w, s.slice.rows);
  w.put_u8(uint8_t(s.sync));
  w.put_u8(uint8_t(s.forced_algo));
  put_f64(w, s.alpha_us);
  put_f64(w, s.beta_gbps);
  w.put_i32(s.ctx);
  w.put_i32(s.batch);
  w.put_i32(s.n_slots);
  w.put_u8(uint8_t(s.kv_type));
  w.put_u8(uint8_t(s.attention));
  w.put_u8(uint8_t(s.lane_order ? 1 : 0) | uint8_t(s.decode_lanes ? 2 : 0));
  put_f64(w, s.step_timeout_s);
  w.put_u64(s.slice_bytes);
  return w.take();
}

util::Expected<Setup> parse_setup(std::span<const uint8_t> p, const std::string& peer) {
  const std::string what = "session setup from " + peer;
  net::Reader r(p, what);
  Setup s;
  model::Config& c = s.config;
  uint8_t u = 0;
  RETURN_IF_ERROR(r.get_string(&s.model_hash, 128));
  RETURN_IF_ERROR(r.get_u8(&u));
  if (u > uint8_t(model::Arch::kGptOss)) return Status::error(what + " names an unknown architecture");
  c.arch = model::Arch(u);
  RETURN_IF_ERROR(r.get_string(&c.arch_name, 256));
  RETURN_IF_ERROR(r.get_string(&c.name, 4096));
  for (int* v : {&c.dim, &c.n_layers, &c.n_heads, &c.n_kv_heads, &c.head_dim, &c.n_ff, &c.n_vocab, &c.n_rot,
                 &c.ctx_train})
    RETURN_IF_ERROR(get_int(r, v));
  RETURN_IF_ERROR(r.get_f32(&c.rms_eps));
  RETURN_IF_ERROR(r.get_f32(&c.rope_base));
  RETURN_IF_ERROR(r.get_f32(&c.rope_freq_scale));
  RETURN_IF_ERROR(get_bool(r, &c.rope_neox));
  RETURN_IF_ERROR(get_bool(r, &c.qkv_bias));
  RETURN_IF_ERROR(get_bool(r, &c.qk_norm));
  RETURN_IF_ERROR(r.get_u8(&u));
  if (u > 3) return Status::error(what + " has unknown model flags");
  c.act = model::Activation(u & 1);
  c.post_norms = u & 2;
  for (int* v : {&c.n_swa, &c.swa_pattern}) RETURN_IF_ERROR(r.get_i32(v));
  for (float* v : {&c.embed_scale, &c.q_scale, &c.logit_softcap, &c.rope_base_swa}) RETURN_IF_ERROR(r.get_f32(v));
  for (int* v : {&c.n_expert, &c.n_expert_used}) RETURN_IF_ERROR(r.get_i32(v));
  RETURN_IF_ERROR(get_bool(r, &c.expert_norm));
  RETURN_IF_ERROR(r.get_f32(&c.expert_scale));
  RETURN_IF_ERROR(get_bool(r, &c.gpt_oss));
  for (float* v : {&c.yarn.ext_factor, &c.yarn.attn_factor, &c.yarn.beta_fast, &c.yarn.beta_slow})
    RETURN_IF_ERROR(r.get_f32(v));
  RETURN_IF_ERROR(r.get_i32(&c.yarn.n_ctx_orig));
  RETURN_IF_ERROR(get_range(r, &s.slice.heads));
  RETURN_IF_ERROR(get_range(r, &s.slice.kv_heads));
  RETURN_IF_ERROR(get_range(r, &s.slice.ff));
  RETURN_IF_ERROR(get_range(r, &s.slice.vocab));
  RETURN_IF_ERROR(r.get_u8(&u));
  if (u > 7) return Status::error(what + " has unknown slice flags");
  s.slice.exact = u & 1;
  s.slice.gather_q8_att = u & 2;
  s.slice.gather_q8_ff = u & 4;
  RETURN_IF_ERROR(get_range(r, &s.slice.rows));
  RETURN_IF_ERROR(r.get_u8(&u));
  if (u > uint8_t(net::SyncType::kF32)) return Status::error(what + " names an unknown sync type");
  s.sync = net::SyncType(u);
  RETURN_IF_ERROR(r.get_u8(&u));
  s.forced_algo = int8_t(u);
  if (s.forced_algo > int8_t(net::AllReduceAlgo::kMpi)) return Status::error(what + " names an unknown algorithm");
  RETURN_IF_ERROR(get_f64(r, &s.alpha_us));
  RETURN_IF_ERROR(get_f64(r, &s.beta_gbps));
  RETURN_IF_ERROR(r.get_i32(&s.ctx));
  RETURN_IF_ERROR(r.get_i32(&s.batch));
  RETURN_IF_ERROR(r.get_i32(&s.n_slots));
  RETURN_IF_ERROR(r.get_u8(&u));
  if (u > uint8_t(model::KvType::kQ8_0)) return Status::error(what + " names an unknown KV cache type");
  s.kv_type = model::KvType(u);
  RETURN_IF_ERROR(r.get_u8(&u));
  if (u > uint8_t(model::AttentionMode::kFlash)) return Status::error(what + " names an unknown attention mode");
  s.attention = model::AttentionMode(u);
  RETURN_IF_ERROR(r.get_u8(&u));
  if (u > 3) return Status::error(what + " has a bad batch-order flag");
  s.lane_order = u & 1;
  s.decode_lanes = u & 2;
  RETURN_IF_ERROR(get_f64(r, &s.step_timeout_s));
  RETURN_IF_ERROR(r.get_u64(&s.slice_bytes));
  RETURN_IF_ERROR(r.finish());
  if (!consistent(s)) return Status::error(what + " has an inconsistent shape or slice");
  return s;
}

model::RunConfig Setup::run_config() const {
  model::RunConfig rc;
  rc.ctx = ctx;
  rc.n_slots = n_slots;
  rc.max_batch = batch;
  rc.kv_type = kv_type;
  rc.attention = attention;
  rc.lane_order = lane_order;
  rc.decode_lanes = decode_lanes;
  return rc;
}

std::vector<uint8_t> encode_tensor_chunk(const TensorChunk& c) {
  net::Writer w;
  w.put_string(c.name);
  w.put_u32(uint32_t(c.type));
  w.put_u64(c.rows);
  w.put_u64(c.cols);
  w.put_u64(c.total_bytes);
  w.put_u64(c.offset);
  w.put_u64(c.bytes.size());
  w.put_bytes(c.bytes);
  return w.take();
}

util::Expected<TensorChunk> parse_tensor_chunk(std::span<const uint8_t> p, const std::string& peer) {
  const std::string what = "weight chunk from " + peer;
  net::Reader r(p, what);
  TensorChunk c;
  uint64_t n = 0;
  RETURN_IF_ERROR(r.get_string(&c.name, 256));
  RETURN_IF_ERROR(get_type(r, &c.type, what));
  RETURN_IF_ERROR(r.get_u64(&c.rows));
  RETURN_IF_ERROR(r.get_u64(&c.cols));
  RETURN_IF_ERROR(r.get_u64(&c.total_bytes));
  RETURN_IF_ERROR(r.get_u64(&c.offset));
  RETURN_IF_ERROR(r.get_u64(&n));
  RETURN_IF_ERROR(r.get_bytes(n, &c.bytes));
  RETURN_IF_ERROR(r.finish());
  const auto& tr = tensor::traits(c.type);
  if (c.rows > (uint64_t(1) << 32) || c.cols > (uint64_t(1) << 32) || c.cols % tr.block_size != 0 ||
      c.total_bytes != c.rows * tensor::row_bytes(c.type, int64_t(c.cols)) || c.offset > c.total_bytes ||
      n > c.total_bytes - c.offset)
    return Status::error(what + ": tensor '" + c.name + "' has inconsistent sizes");
  return c;
}

namespace {

// A token mask: 0 none; 1 the bitmap (u32 words, u64 each); 2 alternating run lengths
// (u32 count, u32 each), the first of tokens not allowed, which is shorter for the masks
// grammars make (a few allowed tokens, or all but a few).
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

std::vector<uint8_t> encode_step(const Step& s) {
  net::Writer w;
  w.put_u32(uint32_t(s.embd_type));
  w.put_u64(s.rows.size());
  w.put_bytes(s.rows);
  w.put_u32(uint32_t(s.segs.size()));
  for (const StepSegment& g : s.segs) {
    w.put_i32(g.slot);
    w.put_i32(g.pos);
    w.put_i32(g.n);
    w.put_u8(uint8_t(g.want) | (g.rowwise ? 0x80 : 0) | (g.every_row ? 0x40 : 0));
    w.put_i32(g.k);
    w.put_f32(g.repeat_penalty);
    w.put_f32(g.presence_penalty);
    w.put_f32(g.frequency_penalty);
    w.put_u32(uint32_t(g.penalties.size()));
    for (const sampler::PenaltyCounts& row : g.penalties) {
      w.put_u32(uint32_t(row.size()));
      for (const auto& [id, count] : row) {
        w.put_i32(id);
        w.put_i32(count);
      }
    }
    w.put_u32(uint32_t(g.logit_bias.size()));
    for (const auto& [id, bias] : g.logit_bias) {
      w.put_i32(id);
      w.put_f32(bias);
    }
    put_mask(w, g.allowed);
    w.put_u32(uint32_t(g.targets.size()));
    for (int32_t t : g.targets) w.put_i32(t);
  }
  return w.take();
}

util::Expected<Step> parse_step(std::span<const uint8_t> p, const std::string& peer) {
  const std::string what = "step from " + peer;
  net::Reader r(p, what);
  Step s;
  uint64_t nb = 0;
  uint32_t n_segs = 0;
  RETURN_IF_ERROR(get_type(r, &s.embd_type, what));
  RETURN_IF_ERROR(r.get_u64(&nb));
  RETURN_IF_ERROR(r.get_bytes(nb, &s.rows));
  RETURN_IF_ERROR(r.get_u32(&n_segs));
  if (n_segs == 0 || n_segs > r.remaining() / 34) return Status::error(what + " lists a bad number of segments");
  s.segs.resize(n_segs);
  for (StepSegment& g : s.segs) {
    uint8_t want = 0;
    uint32_t np = 0, nb = 0, nt = 0;
    RETURN_IF_ERROR(r.get_i32(&g.slot));
    RETURN_IF_ERROR(r.get_i32(&g.pos));
    RETURN_IF_ERROR(r.get_i32(&g.n));
    RETURN_IF_ERROR(r.get_u8(&want));
    g.rowwise = want & 0x80;
    g.every_row = want & 0x40;
    want &= 0x3f;
    RETURN_IF_ERROR(r.get_i32(&g.k));
    RETURN_IF_ERROR(r.get_f32(&g.repeat_penalty));
    RETURN_IF_ERROR(r.get_f32(&g.presence_penalty));
    RETURN_IF_ERROR(r.get_f32(&g.frequency_penalty));
    RETURN_IF_ERROR(r.get_u32(&np));
    if (np > r.remaining() / 4) return Status::error(what + " lists more penalty rows than it carries");
    g.penalties.resize(np);
    for (sampler::PenaltyCounts& row : g.penalties) {
      uint32_t nc = 0;
      RETURN_IF_ERROR(r.get_u32(&nc));
      if (nc > r.remaining() / 8) return Status::error(what + " lists more penalties than it carries");
      row.resize(nc);
      for (auto& [id, count] : row) {
        RETURN_IF_ERROR(r.get_i32(&id));
        RETURN_IF_ERROR(r.get_i32(&count));
      }
    }
    RETURN_IF_ERROR(r.get_u32(&nb));
    if (nb > r.remaining() / 8) return Status::error(what + " lists more logit biases than it carries");
    g.logit_bias.resize(nb);
    for (auto& [id, bias] : g.logit_bias) {
      RETURN_IF_ERROR(r.get_i32(&id));
      RETURN_IF_ERROR(r.get_f32(&bias));
      if (!std::isfinite(bias)) return Status::error(what + " has a logit bias that is not finite");
    }
    RETURN_IF_ERROR(get_mask(r, &g.allowed, what));
    RETURN_IF_ERROR(r.get_u32(&nt));
    if (nt > r.remaining() / 4) return Status::error(what + " lists more targets than it carries");
    g.targets.resize(nt);
    for (int32_t& t : g.targets) RETURN_IF_ERROR(r.get_i32(&t));
    const uint32_t sampled = want != 1 ? 0 : g.every_row ? uint32_t(g.n) : 1;
    if (g.slot < 0 || g.pos < 0 || g.n <= 0 || want > 2 || g.k < 1 || (want == 2 && nt != uint32_t(g.n)) ||
        (g.every_row && want != 1) || (want == 1 && np != sampled) || (!g.allowed.empty() && (want != 1 || g.every_row)))
      return Status::error(what + " is malformed");
    g.want = Want(want);
  }
  RETURN_IF_ERROR(r.finish());
  return s;
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

Status check_step_fits(const Step& s, int dim, int ctx, int n_slots, int max_rows, const std::string& peer) {
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

std::vector<uint8_t> encode_step_reply(const StepReply& rep) {
  net::Writer w;
  w.put_u32(uint32_t(rep.sampled.size()));
  for (const SegmentCandidates& sc : rep.sampled) {
    w.put_u32(uint32_t(sc.cand.size()));
    for (const auto& c : sc.cand) {
      w.put_i32(c.id);
      w.put_f32(c.logit);
    }
    w.put_f32(sc.lse);
  }
  w.put_u32(uint32_t(rep.scores.size()));
  for (const RowScore& x : rep.scores) {
    w.put_f32(x.max);
    put_f64(w, x.sum);
    w.put_f32(x.target);
    w.put_u8(x.owns);
  }
  w.put_u64(rep.counters.bytes_sent);
  w.put_u64(rep.counters.bytes_received);
  put_f64(w, rep.counters.compute_s);
  put_f64(w, rep.counters.sync_s);
  w.put_u64(rep.counters.steps);
  return w.take();
}

util::Expected<StepReply> parse_step_reply(std::span<const uint8_t> p, const std::string& peer) {
  const std::string what = "step reply from " + peer;
  net::Reader r(p, what);
  StepReply rep;
  uint32_t n = 0;
  RETURN_IF_ERROR(r.get_u32(&n));
  if (n > r.remaining() / 8) return Status::error(what + " lists more sampled segments than it carries");
  rep.sampled.resize(n);
  for (SegmentCandidates& sc : rep.sampled) {
    RETURN_IF_ERROR(r.get_u32(&n));
    if (n > r.remaining() / 8) return Status::error(what + " lists more candidates than it carries");
    sc.cand.resize(n);
    for (auto& c : sc.cand) {
      RETURN_IF_ERROR(r.get_i32(&c.id));
      RETURN_IF_ERROR(r.get_f32(&c.logit));
    }
    RETURN_IF_ERROR(r.get_f32(&sc.lse));
  }
  RETURN_IF_ERROR(r.get_u32(&n));
  if (n > r.remaining() / 17) return Status::error(what + " lists more row scores than it carries");
  rep.scores.resize(n);
  for (RowScore& x : rep.scores) {
    RETURN_IF_ERROR(r.get_f32(&x.max));
    RETURN_IF_ERROR(get_f64(r, &x.sum));
    RETURN_IF_ERROR(r.get_f32(&x.target));
    RETURN_IF_ERROR(get_bool(r, &x.owns));
  }
  RETURN_IF_ERROR(r.get_u64(&rep.counters.bytes_sent));
  RETURN_IF_ERROR(r.get_u64(&rep.counters.bytes_received));
  RETURN_IF_ERROR(get_f64(r, &rep.counters.compute_s));
  RETURN_IF_ERROR(get_f64(r, &rep.counters.sync_s));
  RETURN_IF_ERROR(r.get_u64(&rep.counters.steps));
  RETURN_IF_ERROR(r.finish());
  return rep;
}

std::vector<uint8_t> encode_speed_probe(const SpeedProbe& p) {
  net::Writer w;
  w.put_u8(p.measure ? 1 : 0);
  for (int v : {p.shape.dim, p.shape.n_heads, p.shape.n_kv_heads, p.shape.head_dim, p.shape.n_ff}) w.put_i32(v);
  w.put_u32(uint32_t(p.shape.type));
  return w.take();
}

util::Expected<SpeedProbe> parse_speed_probe(std::span<const uint8_t> p, const std::string& peer) {
  const std::string what = "speed probe from " + peer;
  net::Reader r(p, what);
  SpeedProbe s;
  uint8_t u = 0;
  RETURN_IF_ERROR(r.get_u8(&u));
  if (u > 1) return Status::error(what + " has a bad flag");
  s.measure = u != 0;
  ProbeShape& sh = s.shape;
  for (int* v : {&sh.dim, &sh.n_heads, &sh.n_kv_heads, &sh.head_dim, &sh.n_ff}) RETURN_IF_ERROR(get_int(r, v));
  RETURN_IF_ERROR(get_type(r, &sh.type, what));
  RETURN_IF_ERROR(r.finish());
  constexpr int kMax = 1 << 20;  // no model is this wide
  const auto ok = [](int v) { return v > 0 && v <= kMax; };
  if (!ok(sh.dim) || !ok(sh.n_heads) || !ok(sh.n_kv_heads) || !ok(sh.head_dim) || !ok(sh.n_ff) ||
      sh.n_heads % sh.n_kv_heads != 0 || sh.dim % tensor::traits(sh.type).block_size != 0)
    return Status::error(what + " has an inconsistent shape");
  return s;
}

std::vector<uint8_t> encode_speed_reply(const SpeedReply& rep) {
  net::Writer w;
  w.put_string(rep.device);
  put_f64(w, rep.tokens_per_s);
  return w.take();
}

util::Expected<SpeedReply> parse_speed_reply(std::span<const uint8_t> p, const std::string& peer) {
  const std::string what = "speed reply from " + peer;
  net::Reader r(p, what);
  SpeedReply rep;
  RETURN_IF_ERROR(r.get_string(&rep.device, 1024));
  RETURN_IF_ERROR(get_f64(r, &rep.tokens_per_s));
  RETURN_IF_ERROR(r.finish());
  if (!(rep.tokens_per_s >= 0) || !std::isfinite(rep.tokens_per_s))
    return Status::error(what + " gives a speed that is not a non-negative number");
  return rep;
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
