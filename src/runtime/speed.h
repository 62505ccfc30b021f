// speed.h: how fast a node's backend runs a model of a given shape, for shares taken from
// measured speed (`--shares auto|measured`, runtime/cluster.h). Every node (the root
// itself, and each worker on the root's speed probe, protocol.h) times decode steps of
// one synthetic layer of the model's width, with random weights in the model's matrix
// type, on the backend it will run its slice on: the CPU on its threads or a Vulkan
// device. A node's share is then proportional to its speed. Decode reads every weight
// once per token, so its speed is the node's weight bandwidth, which is what a slice of
// layers costs; prompts (compute-bound) are not measured.
// Deliberately no network here: forming.cc and worker.cc carry the probe.
#pragma once
#include <string>

#include "model/backend.h"
#include "tensor/types.h"
#include "util/status.h"
#include "util/thread_pool.h"

namespace runtime {

// The width of the model a speed probe measures.
struct ProbeShape {
  int dim = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0, n_ff = 0;
  tensor::Type type = tensor::Type::Q4_0;  // the model's matrix type (most bytes)
};
ProbeShape probe_shape(const model::Config& cfg, const model::Weights& w);

// A node's device for the auto choice is model::cpu_description(threads) ("cpu (avx512, 2
// threads)", also the CPU backend's describe()) or describe() of its Vulkan device. Nodes
// whose descriptions all agree keep equal shares under auto.

// Decode tokens per second of one layer of `s` (n_ff capped so the layer stays under
// kProbeLayerBytes) on `backend` (empty: the CPU on pool). Writes the synthetic layer to
// a temporary file (TMPDIR, removed at once) and times kProbeSteps decode steps after a
// warm-up one, stopping early past kProbeSeconds; the best step counts (noise only adds).
constexpr size_t kProbeLayerBytes = size_t(96) << 20;
constexpr int kProbeSteps = 6;
constexpr double kProbeSeconds = 3;
util::Expected<double> measure_decode_speed(const ProbeShape& s, util::ThreadPool& pool,
                                            const model::BackendFactory& backend);

}  // namespace runtime
