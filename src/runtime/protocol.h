// protocol.h: the runtime's session messages between the root and a worker, carried as
// net app messages over the cluster's Transport. Each message's fields are listed once
// (protocol.cc's Wire<M>), and that one list is both written little-endian with net::Writer
// and read back with the bounds-checked net::Reader (wire_fields.h): encode_message and
// parse_message<M>; a parse error names the message and the peer.
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
};

struct TensorChunk {
  std::string name;
  tensor::Type type = tensor::Type::F32;
  uint64_t rows = 0, cols = 0, total_bytes = 0, offset = 0;
  std::span<const uint8_t> bytes;  // [offset, offset + size) of the tensor's bytes
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
};
struct Step {
  tensor::Type embd_type = tensor::Type::F32;
  std::span<const uint8_t> rows;  // the segments' rows of the token embedding, file type
  std::vector<StepSegment> segs;  // in row order
  // Copies between the KV pool and the host cache (--cache-ram), done in order before the
  // rows (kv_cache.h's KvCopy; the root's decisions, kv_blocks.h).
  std::vector<model::KvCopy> kv_copies;
  int rows_total() const;         // sum of the segments' n (capped past kMaxStepRows)
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
};

struct SpeedProbe {
  bool measure = false;  // false: only the device's description is asked for
  ProbeShape shape;
};
struct SpeedReply {
  std::string device;       // model::cpu_description() or the Vulkan device's describe()
  double tokens_per_s = 0;  // measure_decode_speed(); 0 when not measured
};

// Each message above (Setup, TensorChunk, Step, StepReply, SpeedProbe, SpeedReply): its
// payload, and the message read back from one, checked field by field and as a whole; a
// parse error names the message and the peer ("step from 10.0.0.2:9000 ...").
template <class M>
std::vector<uint8_t> encode_message(const M& m);
template <class M>
util::Expected<M> parse_message(std::span<const uint8_t> p, const std::string& peer);

std::vector<uint8_t> encode_u64(uint64_t v);
util::Expected<uint64_t> parse_u64(std::span<const uint8_t> p, const std::string& what);

}  // namespace runtime
