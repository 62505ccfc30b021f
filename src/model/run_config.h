// run_config.h: how a node runs the model (RunConfig), the same on every node of a cluster,
// as one type from the command line to the wire: the CLI's flags fill it (cli/flags.cc),
// the root's ClusterOptions carries it, the session setup sends it (runtime/protocol.h) and
// every node builds its backend from it (runtime/node.cc). Its fields are listed once,
// below the struct (run_config_fields), for the setup message's encoder and parser alike.
// So a new setting that reaches every node is a field here with its line in that list, and
// the flag that sets it (cli/flags.cc); nothing copies it field by field on the way.
// Also the one batch-order rule every backend follows (lane_ordered).
#pragma once
#include <cstdint>

#include "kernels/kernels.h"
#include "model/kv_cache.h"
#include "util/status.h"

namespace model {

enum class AttentionMode : uint8_t { kExact = 0, kFlash = 1 };
inline const char* attention_mode_name(AttentionMode m) { return m == AttentionMode::kFlash ? "flash" : "exact"; }

struct RunConfig {
  int ctx = 4096;        // positions per KV slot
  int n_slots = 1;       // sequences that can be in the cache at once (block tables)
  int kv_blocks = 0;     // the KV pool's blocks (kv_cache.h); 0: n_slots full contexts
  // The host KV cache (--cache-ram, runtime/kv_blocks.h): pool blocks evicted to host memory
  // it keeps at most (0: none), each node its own KV heads' share; every node's memory check
  // counts it (runtime::memory_fit), as each may come to hold that many.
  int kv_host_blocks = 0;
  int max_batch = 32;    // rows per forward_batch
  KvType kv_type = KvType::kF16;
  AttentionMode attention = AttentionMode::kExact;
  // Q4_0 / Q8_0 / Q4_K / Q6_K / IQ4_NL / MXFP4 / Q2_K / Q3_K / IQ4_XS segments of
  // >= kLaneMinRows rows in lane order (kernels.h); shorter segments (decode rows) always in vec_dot order, so a row's
  // bits depend only on its own segment, never on the other sequences in the batch. false:
  // everything in vec_dot order.
  bool lane_order = true;
  // Opt-in throughput (`--fast-batches`): decode rows take lane order too when a run of
  // them has >= kLaneMinRows rows, so their bits then depend on how many run together.
  bool decode_lanes = false;
  // Opt-in (`--attn-bf16`): flash attention's QK^T and PV in BF16 on AVX512_BF16 CPUs
  // (kernels::AttentionArgs::bf16); every node the same, so node counts still agree.
  // attention_unsupported refuses it where it cannot run (no AVX512_BF16, not flash + F16).
  bool attn_bf16 = false;
};

// The attention a run uses, for start-up lines: "exact", "flash" or "flash-bf16" (--attn-bf16).
inline const char* attention_label(const RunConfig& rc) {
  return rc.attention != AttentionMode::kFlash ? "exact" : rc.attn_bf16 ? "flash-bf16" : "flash";
}

// RunConfig's fields in wire order, for runtime/wire_fields.h's writer and reader alike
// (the session setup carries them; a new field is one line here, and a wire change bumps
// net's kProtocolVersion). Whole-message checks (ranges) stay in runtime/protocol.cc.
template <class IO, class RC>
util::Status run_config_fields(IO& io, RC& rc) {
  RETURN_IF_ERROR(io.i32(rc.ctx, rc.max_batch, rc.n_slots, rc.kv_blocks, rc.kv_host_blocks));
  RETURN_IF_ERROR(io.enum8(rc.kv_type, KvType::kQ8_0, "names an unknown KV cache type"));
  RETURN_IF_ERROR(io.enum8(rc.attention, AttentionMode::kFlash, "names an unknown attention mode"));
  return io.bits("has a bad batch-order flag", rc.lane_order, rc.decode_lanes, rc.attn_bf16);
}

constexpr int kLaneMinRows = int(kernels::kLaneMinBatch);
// Whether n rows of a segment run in lane order (else vec_dot order): the one rule every
// backend follows, and what a cluster records so that replaying a slot gives the same bits.
// Lane order needs lane_order, and >= kLaneMinRows rows unless decode_lanes; never rowwise.
inline bool lane_ordered(int n, bool rowwise, bool lane_order, bool decode_lanes) {
  return !rowwise && lane_order && (n >= kLaneMinRows || decode_lanes);
}

}  // namespace model
