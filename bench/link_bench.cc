// link_bench.cc: Google Benchmark for link encryption (issue 18, net/link_crypto.h): seal +
// open (AES-256-GCM, the 28-byte header as associated data) of one frame of each size, and
// of a decode step's frames: `frames` frames carrying `bytes` bytes in all, as measured for a
// token on a 2-node cluster (docs/BENCHMARKS.md, "Link encryption"). The time reported is
// both ends' CPU work for one direction's frames; the link itself is not involved.
// Not a test: no assertions on timing.
//
// Built with the release preset: cmake --build build/release --target link_bench
// Run: build/release/link_bench
#include <benchmark/benchmark.h>

#include <cstring>
#include <vector>

#include "net/link_crypto.h"
#include "net/wire.h"

namespace {

net::LinkKey test_key() {
  net::LinkKey k{};
  for (size_t i = 0; i < k.size(); ++i) k[i] = uint8_t(i * 29 + 3);
  return k;
}

// Seals and opens frames of the given sizes in turn; counts bytes and frames.
void seal_open(benchmark::State& state, const std::vector<size_t>& sizes) {
  net::FrameCipher tx(test_key(), net::FrameCipher::Mode::kSeal), rx(test_key(), net::FrameCipher::Mode::kOpen);
  size_t max = 0, total = 0;
  for (size_t s : sizes) max = std::max(max, s), total += s;
  std::vector<uint8_t> msg(max, 0x5a), wire(max);
  uint8_t header[net::kHeaderBytes], tag[net::kTagBytes];
  uint64_t seq = 0;
  for (auto _ : state) {
    for (size_t s : sizes) {
      net::encode_header({net::kProtocolVersion, net::MessageType::kAllReduce, net::kFlagSealed, seq, s + net::kTagBytes},
                         header);
      tx.seal(seq, header, std::span<const uint8_t>(msg.data(), s), wire.data(), tag);
      if (!rx.open(seq, header, std::span<uint8_t>(wire.data(), s), tag)) state.SkipWithError("tag mismatch");
      ++seq;
    }
    benchmark::DoNotOptimize(wire.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(total));
  state.counters["frames/s"] =
      benchmark::Counter(double(state.iterations()) * double(sizes.size()), benchmark::Counter::kIsRate);
}

void BM_SealOpenFrame(benchmark::State& state) { seal_open(state, {size_t(state.range(0))}); }
BENCHMARK(BM_SealOpenFrame)->Arg(0)->Arg(64)->Arg(612)->Arg(2304)->Arg(16384)->Arg(65536)->Arg(1 << 20)
    ->Arg(64 << 20);

// A decode step's frames in one direction: `frames` frames of `bytes` bytes in all (spread
// evenly). Arguments from BENCHMARKS.md's measurement of one token.
void BM_DecodeStepFrames(benchmark::State& state) {
  const size_t frames = size_t(state.range(0)), bytes = size_t(state.range(1));
  std::vector<size_t> sizes(frames, bytes / frames);
  sizes[0] += bytes % frames;
  seal_open(state, sizes);
}
BENCHMARK(BM_DecodeStepFrames)
    ->Args({121, 111333})   // SmolLM2-135M, 2 nodes, exact sync (bench: the root's frames per token)
    ->Args({129, 854016})   // Llama-3 8B shape, 2 nodes, exact sync (plan: 834 KiB per token)
    ->Args({65, 282931})    // Llama-3 8B shape, 2 nodes, q8_0 all-gather (plan: 276.3 KiB per token)
    ->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
