// vulkan_backend.h: the forward pass's ops on a Vulkan device (model/backend.h, issue 15),
// over the kernel layer kernels/vulkan/vulkan.h. Built only with SHARDLM_VULKAN (library
// shardlm_model_vulkan), so model/ itself never depends on Vulkan.
// The backend owns the device, the weights uploaded once in their GGUF types (one Buffer
// per matrix, norms as F32, biases tiled to a batch of rows), an F16 KV cache on the device
// paged as model::KvCache's (a pool of blocks per full-attention layer read through the
// root's block tables; a whole context per slot for sliding-window layers), its host KV
// cache's entries (kv_copy: device <-> host copies between steps), and the batch's
// activations there. Ops are recorded into one
// command buffer, submitted once per step on one node; with a Collective, at each reduce
// point the input rows cross to host memory, the Collective works there (its local
// products upload x, multiply on the device and download y) and the sum is uploaded.
// Numerics (vulkan.h): F32 activations, never quantized to Q8; flash attention only. Close
// to the CPU's flash path, never bit-identical.
// Deliberately not here: the exact attention path, Q8_0/F32 KV caches, sliding windows and
// the other gemma3 specifics, mixture of experts, splitting a matrix larger than the
// device's largest buffer (all refused with a message by make_vulkan_backend).
#pragma once
#include <memory>
#include <string>

#include "model/backend.h"

namespace model {

// Why no Vulkan device can run (cfg, rc, part) whatever its memory, or "": every model
// feature the shaders lack by name ("gpt-oss needs mixture of experts, sliding-window
// attention, attention sinks and an output-projection bias, ..."), else the first setting
// or weight type. make_vulkan_backend opens the device first and prefixes its name.
std::string vulkan_unsupported(const Config& cfg, const Weights& w, const RunConfig& rc, const Partition& part);

// Opens Vulkan device `index`, checks that the weights, the KV cache and the activations
// fit its memory, and uploads the weights. Errors name the device and its memory, or say
// what is unsupported and what to use instead.
util::Expected<std::unique_ptr<Backend>> make_vulkan_backend(int index, const Config& cfg, const Weights& w,
                                                             const RunConfig& rc, const Partition& part);

}  // namespace model
