// protocol.h: the runtime's session messages between the root and a worker, carried as
// net app messages over the cluster's Transport. Each message struct lists its wire fields
// once, beside its members (M::fields), ending with what the message must be as a whole;
// that one list is both written little-endian with net::Writer and read back with the
// bounds-checked net::Reader (wire_fields.h): encode_message and parse_message<M>
// (protocol.cc). A parse error names the message (M::kName) and the peer. So a new field
// is its member and its line in the list below it.
//   setup        root -> worker: model hash, config, this node's slice, sync type, link
//                measurements (α, β) or a forced algorithm, the run configuration
//                (model/run_config.h: ctx, rows per step, KV slots, pool blocks, KV type,
//                attention mode, batch order), timeouts, the slice's bytes
//   setup-reply  worker -> root: whether it already holds the slice (cache or --model);
//                or an error (net kError) when the worker cannot take the session: its
//                memory is too small (code kTooLittleMemory: the root does not re-plan over
//                fewer nodes), or its --model is another file
//   tensor       root -> worker: one chunk (<= 64 MiB) of one tensor of the slice
//   weights-done root -> worker: tensor count; the worker answers ready (or an error)
//   step         root -> worker: the token embedding rows in their file type, and per
//                segment (one sequence's consecutive rows: KV slot, pos, n, its KV block
//                table's new entries) what to return
//                (nothing / top-k candidates of its last row / row scores for targets),
//                whether its rows take vec_dot order whatever their number, its penalties,
//                logit_bias and the tokens a constrained draw may take; the copies between
//                the KV pool and the host cache to do first (save, restore, forget)
//   step-reply   worker -> root: per sampled segment its candidates + local log-sum-exp,
//                per scored row its local (max, sum of exp) and the target's logit if
//                owned; its counters
//   shutdown     root -> worker: the session ends normally
//   speed-probe  root -> worker, before setup (runtime/speed.h): the model's width and
//                matrix type, and whether to time it or only name the device
//   speed-reply  worker -> root: its device's description, and decode tokens per second
//                of one layer of that width (0 when not timed); or an error (net kError)
// Deliberately no I/O here: runtime/forming.cc and stepping.cc (root) and worker.cc send and receive.
#pragma once
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/kv_cache.h"
#include "model/transformer.h"
#include "net/collectives.h"
#include "net/wire.h"
#include "plan/plan.h"
#include "runtime/scoring.h"
#include "runtime/speed.h"
#include "sampler/distributed.h"
#include "util/status.h"

namespace runtime {

enum class Msg : uint16_t {
  kSetup = 0, kSetupReply = 1, kTensor = 2, kWeightsDone = 3, kReady = 4,
  kStep = 5, kStepReply = 6, kShutdown = 7, kSpeedProbe = 8, kSpeedReply = 9,
};
inline net::MessageType msg_type(Msg m) { return net::app_message(static_cast<uint16_t>(m)); }

constexpr size_t kMaxChunkBytes = size_t(64) << 20;  // tensor bytes per frame
constexpr int kMaxStepRows = 65536;  // rows of one step (setup's batch)
constexpr int kMaxSlots = 4096;      // KV slots of a session

// The two directions a field list runs in (wire_fields.h; only protocol.cc runs the lists).
namespace wire {
class Out;
class In;
}  // namespace wire

// A model's configuration (part of the setup).
template <class IO, class C>
util::Status config_fields(IO& io, C& c) {
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

struct Setup {
  std::string model_hash;  // SHA-256 hex of the GGUF file's bytes
  model::Config config;
  plan::NodeSlice slice;   // ranges only (share and notes are not sent)
  net::SyncType sync = net::SyncType::kQ8_0;
  int8_t forced_algo = -1;       // net::AllReduceAlgo, or -1: choose per size from alpha/beta
  double alpha_us = 50, beta_gbps = 1;
  model::RunConfig run;          // how every node runs the model (max_batch: rows per step)
  double step_timeout_s = 5;     // base timeout of a collective (plus per-row allowance)
  uint64_t slice_bytes = 0;      // the slice's weights (the worker checks its memory first)
  std::string slice_key() const; // model hash + ranges: what a worker caches slices by
  bool consistent() const;       // whether the shape and slice are possible

  static constexpr const char* kName = "session setup";
  static util::Status fields(auto& io, auto& s) {
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
    RETURN_IF_ERROR(io.u64(s.slice_bytes));
    return io.check(s.consistent(), "has an inconsistent shape or slice");
  }
};

struct TensorChunk {
  std::string name;
  tensor::Type type = tensor::Type::F32;
  uint64_t rows = 0, cols = 0, total_bytes = 0, offset = 0;
  std::span<const uint8_t> bytes;  // [offset, offset + size) of the tensor's bytes
  bool sizes_ok() const;           // rows, cols, offset and bytes of one possible tensor

  static constexpr const char* kName = "weight chunk";
  static util::Status fields(auto& io, auto& c) {
    RETURN_IF_ERROR(io.str(c.name, 256));
    RETURN_IF_ERROR(io.type(c.type));
    RETURN_IF_ERROR(io.u64(c.rows, c.cols, c.total_bytes, c.offset));
    RETURN_IF_ERROR(io.bytes(c.bytes));
    return io.check(c.sizes_ok(), "has inconsistent sizes");
  }
};

// kCandidates: the segment's last row is sampled (every row when every_row: speculative
// decoding verifies drafts so); kScores: every row whose target is >= 0 is scored
// (perplexity), see scoring.h.
enum class Want : uint8_t { kNothing = 0, kCandidates = 1, kScores = 2 };
struct StepSegment {
  int32_t slot = 0, pos = 0, n = 0;  // rows of one sequence: positions pos..pos+n-1 of a KV slot
  Want want = Want::kNothing;
  bool rowwise = false;           // model::Segment::rowwise (a replay of decode rows, or drafts)
  bool every_row = false;         // kCandidates: candidates for every row, not only the last
  int32_t k = 1;                  // candidates to return (n_vocab: the whole range)
  // kCandidates: one list per sampled row (1, or n with every_row), each empty when the
  // penalties are off.
  std::vector<sampler::PenaltyCounts> penalties;
  float repeat_penalty = 1, presence_penalty = 0, frequency_penalty = 0;
  sampler::LogitBias logit_bias;  // added after the penalties (each node its own ids)
  // kCandidates: empty, or the tokens the draw may take (bit id % 64 of word id / 64, over
  // the whole vocabulary): each node leaves the others out of its candidates and its
  // log-sum-exp. On the wire as the shorter of the bitmap and its run lengths.
  std::vector<uint64_t> allowed;
  std::vector<int32_t> targets;   // kScores: [n] target id per row, -1: not scored
  // The slot's KV block table from entry blocks_from on (model::Segment): the blocks of
  // positions blocks_from * kKvBlockRows .. pos + n - 1, which the root allocated
  // (kv_blocks.h); -1: none (a step built without a pool).
  int32_t blocks_from = -1;
  std::vector<int32_t> blocks;
  bool well_formed() const;  // what a segment must be, beyond what its fields can carry

  static util::Status fields(auto& io, auto& g) {
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
    return io.check(g.well_formed(), "is malformed");
  }
  // `allowed` on the wire: the shorter of the bitmap and its run lengths (protocol.cc).
  static util::Status mask_field(wire::Out& io, const std::vector<uint64_t>& m);
  static util::Status mask_field(wire::In& io, std::vector<uint64_t>& m);
};
struct Step {
  tensor::Type embd_type = tensor::Type::F32;
  std::span<const uint8_t> rows;  // the segments' rows of the token embedding, file type
  std::vector<StepSegment> segs;  // in row order
  // Copies between the KV pool and the host cache (--cache-ram), done in order before the
  // rows (kv_cache.h's KvCopy; the root's decisions, kv_blocks.h).
  std::vector<model::KvCopy> kv_copies;
  int rows_total() const;         // sum of the segments' n (capped past kMaxStepRows)

  static constexpr const char* kName = "step";
  static util::Status fields(auto& io, auto& s) {
    RETURN_IF_ERROR(io.type(s.embd_type));
    RETURN_IF_ERROR(io.bytes(s.rows));
    RETURN_IF_ERROR(io.list(s.segs, 42, "lists a bad number of segments",
                            [](auto& io, auto& g) { return StepSegment::fields(io, g); }, true));
    return io.list(s.kv_copies, 9, "lists more KV copies than it carries", [](auto& io, auto& c) {  // v13
      RETURN_IF_ERROR(io.enum8(c.kind, model::KvCopy::Kind::kForget, "names an unknown KV copy"));
      RETURN_IF_ERROR(io.i32(c.block, c.entry));
      return io.check(c.block >= 0 && c.entry >= 0, "has a KV copy with a negative block or entry");
    });
  }
};
// Whether a parsed step fits a session: its rows of `dim` values in embd_type, at most
// max_rows of them, each segment in a slot < n_slots (no slot twice) and inside the context,
// its block entries (if any) ids < kv_blocks that end with the block of its last row.
util::Status check_step_fits(const Step& s, int dim, int ctx, int n_slots, int max_rows, const std::string& peer,
                             int kv_blocks = 0);
// The part of that check the root applies to a step it builds (stepping.cc), in the same
// order: rows over max_rows, a slot outside [0, n_slots) or a segment past ctx, a slot twice.
enum class StepFit : uint8_t { kFits, kRows, kSlotOrContext, kSlotTwice };
StepFit step_fit(const std::vector<StepSegment>& segs, int rows, int ctx, int n_slots, int max_rows);

// A node's running totals since its session's weights were in place.
struct NodeCounters {
  uint64_t bytes_sent = 0, bytes_received = 0;
  double compute_s = 0, sync_s = 0;
  uint64_t steps = 0;
  uint64_t rows = 0;  // token rows of those steps (prompt and decode rows; a step has one or more)
};
struct SegmentCandidates {
  std::vector<sampler::Candidate> cand;  // best first
  float lse = 0;                         // log-sum-exp over the node's vocabulary range
};
struct StepReply {
  std::vector<SegmentCandidates> sampled;  // one per sampled row of kCandidates segments, in order
  std::vector<RowScore> scores;   // kScores: one per scored row, in row order
  NodeCounters counters;

  static constexpr const char* kName = "step reply";
  static util::Status fields(auto& io, auto& rep) {
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

struct SpeedProbe {
  bool measure = false;  // false: only the device's description is asked for
  ProbeShape shape;
  bool shape_ok() const;  // a possible model's shape

  static constexpr const char* kName = "speed probe";
  static util::Status fields(auto& io, auto& p) {
    RETURN_IF_ERROR(io.bits("has a bad flag", p.measure));
    RETURN_IF_ERROR(io.i32(p.shape.dim, p.shape.n_heads, p.shape.n_kv_heads, p.shape.head_dim, p.shape.n_ff));
    RETURN_IF_ERROR(io.type(p.shape.type));
    return io.check(p.shape_ok(), "has an inconsistent shape");
  }
};
struct SpeedReply {
  std::string device;       // model::cpu_description() or the Vulkan device's describe()
  double tokens_per_s = 0;  // measure_decode_speed(); 0 when not measured

  static constexpr const char* kName = "speed reply";
  static util::Status fields(auto& io, auto& rep) {
    RETURN_IF_ERROR(io.str(rep.device, 1024));
    RETURN_IF_ERROR(io.f64(rep.tokens_per_s));
    return io.check(rep.tokens_per_s >= 0 && std::isfinite(rep.tokens_per_s),
                    "gives a speed that is not a non-negative number");
  }
};

// Each message above (Setup, TensorChunk, Step, StepReply, SpeedProbe, SpeedReply): its
// payload, and the message read back from one (M::fields over the whole payload, nothing
// after it); a parse error names the message and the peer ("step from 10.0.0.2:9000 ...").
template <class M>
std::vector<uint8_t> encode_message(const M& m);
template <class M>
util::Expected<M> parse_message(std::span<const uint8_t> p, const std::string& peer);

std::vector<uint8_t> encode_u64(uint64_t v);
util::Expected<uint64_t> parse_u64(std::span<const uint8_t> p, const std::string& what);

}  // namespace runtime
