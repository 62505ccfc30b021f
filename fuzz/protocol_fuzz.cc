// protocol_fuzz.cc: libFuzzer target for the runtime's session messages (runtime/protocol.h),
// every message one side parses from the other:
//   worker parses from the root: speed probe, setup, tensor chunk, weights-done (u64), step
//   (and check_step_fits against a few session shapes: dims, contexts, slots);
//   root parses from a worker: speed reply, setup-reply (u64), step reply.
// The whole input goes to every parser. A refusal must carry a non-empty message; an
// accepted message must survive encode -> parse -> encode unchanged (the encoders write
// exactly what the parsers read). LLVMFuzzerInitialize writes one valid message of each
// kind into the corpus directory (the first non-flag argument) as seeds.
// Deliberately no sockets: frame_fuzz covers the frames.
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include "runtime/protocol.h"

namespace {

template <typename T>
void must_explain(const util::Expected<T>& e) {
  if (!e.ok() && e.error().empty()) __builtin_trap();
}
void must_explain(const util::Status& s) {
  if (!s.ok() && s.message().empty()) __builtin_trap();
}

// encode(parse(encode(x))) == encode(x) for an accepted x.
template <typename T>
void round_trip(const util::Expected<T>& got, const std::string& peer) {
  if (!got.ok()) return;
  const std::vector<uint8_t> once = runtime::encode_message(got.value());
  auto again = runtime::parse_message<T>(std::span<const uint8_t>(once), peer);
  if (!again.ok() || runtime::encode_message(again.value()) != once) __builtin_trap();
}

// Seeds must be accepted by their own parser (else the round trips above never run).
void write_seeds(const std::string& dir) {
  auto put = [&](const char* name, const std::vector<uint8_t>& b) {
    const std::span<const uint8_t> p(b);
    const bool ok = std::string(name) == "seed_setup"   ? runtime::parse_message<runtime::Setup>(p, "x").ok()
                    : std::string(name) == "seed_chunk" ? runtime::parse_message<runtime::TensorChunk>(p, "x").ok()
                    : std::string(name) == "seed_step"  ? runtime::parse_message<runtime::Step>(p, "x").ok()
                    : std::string(name) == "seed_reply" ? runtime::parse_message<runtime::StepReply>(p, "x").ok()
                    : std::string(name) == "seed_probe" ? runtime::parse_message<runtime::SpeedProbe>(p, "x").ok()
                    : std::string(name) == "seed_speed" ? runtime::parse_message<runtime::SpeedReply>(p, "x").ok()
                                                        : runtime::parse_u64(p, "x").ok();
    if (!ok) __builtin_trap();
    std::ofstream(dir + "/" + name, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), b.size());
  };
  runtime::Setup s;
  s.model_hash = std::string(64, 'a');
  s.config.arch_name = "llama";
  s.config.name = "seed";
  s.config.dim = 64;
  s.config.n_layers = 2;
  s.config.n_heads = 4;
  s.config.n_kv_heads = 2;
  s.config.head_dim = 16;
  s.config.n_ff = 128;
  s.config.n_vocab = 100;
  s.config.n_rot = 16;
  s.config.ctx_train = 256;
  s.slice.heads = {0, 2};
  s.slice.kv_heads = {0, 1};
  s.slice.ff = {0, 64};
  s.slice.vocab = {0, 50};
  s.run.ctx = 256;
  put("seed_setup", runtime::encode_message(s));
  const std::vector<uint8_t> bytes(36, 7);
  put("seed_chunk", runtime::encode_message(runtime::TensorChunk{"blk.0.attn_q.weight", tensor::Type::Q8_0, 2, 32, 68, 32,
                                                  std::span<const uint8_t>(bytes.data(), 36)}));
  runtime::Step st;
  st.embd_type = tensor::Type::Q8_0;
  st.rows = std::span<const uint8_t>(bytes.data(), 34);
  runtime::StepSegment seg;
  seg.slot = 1;
  seg.pos = 3;
  seg.n = 1;
  seg.want = runtime::Want::kCandidates;
  seg.k = 40;
  seg.penalties = {{{5, 2}, {9, 1}}};
  st.segs = {seg};
  put("seed_step", runtime::encode_message(st));
  runtime::StepReply r;
  r.sampled = {{{{1, 0.5f}, {7, -1.0f}}, 2.0f}};
  r.counters.steps = 3;
  put("seed_reply", runtime::encode_message(r));
  put("seed_u64", runtime::encode_u64(1));
  put("seed_probe", runtime::encode_message(runtime::SpeedProbe{true, {576, 9, 3, 64, 1536, tensor::Type::Q4_1}}));
  put("seed_speed", runtime::encode_message(runtime::SpeedReply{"cpu (avx2, 4 threads)", 812.5}));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  for (int i = 1; i < *argc; ++i)
    if ((*argv)[i][0] != '-') { write_seeds((*argv)[i]); break; }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> in(data, size);
  const std::string peer = "worker 10.0.0.1:9000";

  auto setup = runtime::parse_message<runtime::Setup>(in, peer);
  must_explain(setup);
  round_trip(setup, peer);
  if (setup.ok()) (void)setup->slice_key();

  auto chunk = runtime::parse_message<runtime::TensorChunk>(in, peer);
  must_explain(chunk);
  round_trip(chunk, peer);
  if (chunk.ok() && chunk->offset + chunk->bytes.size() > chunk->total_bytes) __builtin_trap();

  auto step = runtime::parse_message<runtime::Step>(in, peer);
  must_explain(step);
  round_trip(step, peer);
  if (step.ok()) {
    for (int dim : {32, 576, 4096}) {
      for (int ctx : {1, 4096}) {
        for (int slots : {1, 4}) {
          util::Status st = runtime::check_step_fits(*step, dim, ctx, slots, 256, peer);
          must_explain(st);
          if (!st.ok()) continue;
          const int rows = step->rows_total();
          if (rows > 256 || step->rows.size() != tensor::row_bytes(step->embd_type, dim) * size_t(rows))
            __builtin_trap();
          for (const runtime::StepSegment& g : step->segs)
            if (g.slot >= slots || g.pos + int64_t(g.n) > ctx) __builtin_trap();
        }
      }
    }
  }

  auto reply = runtime::parse_message<runtime::StepReply>(in, peer);
  must_explain(reply);
  round_trip(reply, peer);

  auto probe = runtime::parse_message<runtime::SpeedProbe>(in, peer);
  must_explain(probe);
  round_trip(probe, peer);

  auto speed = runtime::parse_message<runtime::SpeedReply>(in, peer);
  must_explain(speed);
  round_trip(speed, peer);

  auto u = runtime::parse_u64(in, "setup reply from " + peer);
  must_explain(u);
  if (u.ok() && runtime::encode_u64(*u) != std::vector<uint8_t>(in.begin(), in.end())) __builtin_trap();
  return 0;
}
