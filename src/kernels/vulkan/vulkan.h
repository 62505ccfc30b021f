// vulkan.h: the Vulkan compute kernel layer (issue 15, first part): find devices, open one,
// keep buffers on it (weights in their GGUF block layout, F32 activations, an F16 KV
// cache), and record many kernel dispatches into one command buffer that is submitted once
// (a backend uploads a model's weights once and runs a whole layer, or step, per submit).
// The Vulkan loader is opened at run time (loader.h): without it every call here returns
// an error saying what to install. Shaders are GLSL compiled to SPIR-V at build time and
// embedded (shaders/*.comp, CMake option SHARDLM_VULKAN).
//
// Numerics: weights are dequantized in the shader block by block with tensor::
// dequantize_row's formulas. Activations are F32, but before a matmul of any weight type
// but F32 they are rounded to its vec_dot type's grid as the CPU's kernels::
// quantize_activation converts them (Q8_0, Q8_1: 32 per block, d in fp16; Q8_K: 256 per
// block, d a float; F16, BF16: each value; act_round.comp), x' = d * q in F32: bit for bit the CPU's quantized
// values dequantized (vulkan_test); Q4_1 and Q5_1 weights' m multiplies Q8_1's s as on the
// CPU (fp16(d * sum(q)), also bit for bit), not sum(x'). Sums are F32 (in order per
// invocation, then a tree): results are within about 3e-7 of sum |w||x'| of a float64 dot
// of the dequantized rows with x' (vulkan_test), so they differ from kernels::matmul only
// by summation order; never bit-identical to the CPU. Over a whole model that is not
// closeness to 0.1%: a last-bit difference moves a value across a rounding boundary now and
// then (the CPU's scalar and SIMD paths are 4% apart in perplexity on a 64-token chunk of
// SmolLM2 Q4_1). F16 and BF16 weights' activations stay F32 (the CPU rounds them to F16/BF16).
// Deliberately not here: the forward pass, sharing a device between processes, buffer
// sub-allocation (one VkDeviceMemory per Buffer), several queues, cooperative matrices.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tensor/types.h"
#include "util/status.h"

namespace kernels::vulkan {

struct DeviceInfo {
  int index = 0;                  // position in vkEnumeratePhysicalDevices
  std::string name;               // "llvmpipe (LLVM 15.0.6, 256 bits)"
  std::string type;               // "discrete GPU", "integrated GPU", "CPU", ...
  uint64_t memory_bytes = 0;      // largest device-local heap
  uint64_t max_buffer_bytes = 0;  // largest storage buffer one binding can address
  uint32_t subgroup_size = 0;
  bool cooperative_matrix = false;  // VK_KHR_cooperative_matrix advertised
};

// "Vulkan device 0 (llvmpipe (LLVM 15.0.6, 256 bits), 23.4 GiB of device memory)"
std::string describe(const DeviceInfo& info);

// Every device the loader reports. Error: no loader, or the instance cannot be created.
util::Expected<std::vector<DeviceInfo>> list_devices();

class Device;

// A storage buffer on one device. Move-only; freed with its Device still open.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept;
  ~Buffer();
  size_t bytes() const { return bytes_; }
  const Device* device() const { return dev_; }
  uint64_t vk_handle() const { return buffer_; }  // the VkBuffer (kernels/vulkan internals)

 private:
  friend class Device;
  Device* dev_ = nullptr;
  uint64_t buffer_ = 0;  // VkBuffer
  uint64_t memory_ = 0;  // VkDeviceMemory
  void* mapped_ = nullptr;  // host pointer when the memory is host-visible (no staging)
  size_t bytes_ = 0;
};

struct OpenOptions {
  // Use device-local buffers with staging copies even where device memory is host-visible
  // (tests: exercises the path discrete GPUs take on a unified-memory driver).
  bool force_staging = false;
  // Rows per invocation of matvec.comp; 0: by device type (8 on a CPU device, 1 on a GPU).
  // Tests: exercises the other layouts on lavapipe.
  uint32_t matvec_rows = 0;
};

// One opened device: instance, logical device, a compute queue, and a pipeline per
// embedded shader (created at open). Use it, its Buffers and Commands from one thread.
class Device {
 public:
  static util::Expected<std::unique_ptr<Device>> open(int index, const OpenOptions& opts = {});
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const DeviceInfo& info() const { return info_; }
  // Error unless `bytes` of `what` ("model blk.*", "KV cache") fit the device's memory:
  // "what needs 4.1 GiB but Vulkan device 0 (name, 2.0 GiB of device memory) ...".
  util::Status check_fits(uint64_t bytes, const std::string& what) const;
  // A buffer of `bytes` (rounded up to 16); `what` names it in errors ("blk.0.ffn_up").
  // Error: larger than the device's memory or buffer limit, or allocation failed, with
  // the device's name and memory in the message.
  util::Expected<Buffer> alloc(size_t bytes, const std::string& what);
  // Copies between host memory and dst/src at byte offset (staging when not host-visible).
  util::Status upload(Buffer& dst, const void* src, size_t bytes, size_t offset = 0);
  util::Status download(const Buffer& src, void* dst, size_t bytes, size_t offset = 0) const;

  struct Impl;
  Impl& impl() const { return *impl_; }

 private:
  Device() = default;
  void release(Buffer& b);
  friend class Buffer;
  DeviceInfo info_;
  std::unique_ptr<Impl> impl_;
};

// Weight types Commands::matmul takes: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K,
// Q5_K, Q6_K.
bool supports_weight_type(tensor::Type t);

// Shapes of the attention kernels. Queries and outputs are F32 [n_q][n_heads][head_dim];
// the K and V caches are F16 [n_kv_heads][n_ctx][head_dim] (one buffer each; or paged,
// KvPages); query head h
// reads KV head h / (n_heads / n_kv_heads). Query t is at position pos0 + t and attends
// causally to positions 0 .. pos0 + t, all already stored in the cache.
struct AttentionShape {
  int n_q = 1;
  int pos0 = 0;
  int n_heads = 1;
  int n_kv_heads = 1;
  int head_dim = 64;  // even, <= kMaxHeadDim
  int n_ctx = 1;      // positions each cache head has room for (>= pos0 + n_q)
  float scale = 0;    // usually 1/sqrt(head_dim)
  int window = 0;     // > 0: the query at position P sees only P - window + 1 .. P
  // Query head h reads KV head (h + head_offset) / group: group is the model's query heads
  // per KV head (0: n_heads / n_kv_heads), head_offset where a node's slice starts inside
  // its first KV group (a slice of heads [hb, ..) and KV heads [kb, ..): hb - kb * group).
  int group = 0;
  int head_offset = 0;
};
constexpr int kMaxHeadDim = 256;
// A paged cache (model/kv_cache.h, issue 32): each KV head's plane holds n_rows rows in
// blocks of block_rows (a multiple of 64, flash_decode's chunk); a sequence's position j is
// row table[table0 + j / block_rows] * block_rows + j % block_rows, table an int32 buffer
// of block ids. The kernels read and sum the same values in the same order as from a
// contiguous cache: only the addresses of whole runs of rows change.
struct KvPages {
  const Buffer* table = nullptr;
  int table0 = 0;
  int block_rows = 64;
  int n_rows = 0;
};
// Scratch bytes flash_decode needs for a shape (its per-chunk partial results).
size_t flash_decode_scratch_bytes(const AttentionShape& a);

// One command buffer: ops are recorded in order, each after a barrier on the previous
// one's writes, then submitted once. Sizes are CHECKed against the buffers at recording.
// Reusable: after submit_and_wait, record again.
class Commands {
 public:
  explicit Commands(Device& dev);
  ~Commands();
  Commands(const Commands&) = delete;
  Commands& operator=(const Commands&) = delete;

  // y[b][r] = dot(W[r], x[b]) for r < rows, b < n_batch. W: rows x cols of type wt in the
  // GGUF row layout (row_bytes(wt, cols) apart); x: F32 [n_batch][cols]; y: F32
  // [n_batch][rows]. cols is a multiple of the block size (32 for the float types too).
  // n_batch == 1 runs the matrix x vector shader, larger batches the tiled GEMM. For any
  // wt but F32, x is first rounded to traits(wt).vec_dot_type's grid (round_activations,
  // into scratches the Commands owns; x itself is not changed).
  void matmul(tensor::Type wt, const Buffer& W, int64_t rows, int64_t cols, const Buffer& x,
              int64_t n_batch, Buffer& y);
  // out = n values of x rounded to the grid of activation type t (Q8_0, Q8_1, Q8_K, F16 or
  // BF16; n a multiple of its block size): per block the CPU quantizer's d and q, out = float(d as
  // stored) * q, i.e. tensor::dequantize_row of kernels::quantize_activation's output.
  // Q8_1 also writes each block's s (float of the stored fp16) to sums (n / 32 floats).
  void round_activations(tensor::Type t, Buffer& out, const Buffer& x, int64_t n, Buffer* sums = nullptr);
  // out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w for each of n_rows rows of n values.
  void rmsnorm(Buffer& out, const Buffer& x, const Buffer& w, int64_t n_rows, int64_t n, float eps);
  // out = a + b, n values (out may be a or b: the residual adds).
  void add(Buffer& out, const Buffer& a, const Buffer& b, int64_t n);
  // out = silu(gate) * up, n values.
  void swiglu(Buffer& out, const Buffer& gate, const Buffer& up, int64_t n);
  // out = gelu(gate) * up, n values: gelu's tanh form in F32 (kernels::gelu's function,
  // not kernels::geglu's table of F16 values).
  void geglu(Buffer& out, const Buffer& gate, const Buffer& up, int64_t n);
  // In place over each of n_rows rows of n values.
  void softmax(Buffer& x, int64_t n_rows, int64_t n);
  // Rotates x [n_tokens][n_heads][head_dim] in place with cache [n_tokens][n_rot] (the
  // (cos, sin) pairs kernels::rope_cache gives for each token's position).
  void rope(Buffer& x, const Buffer& cache, int64_t n_tokens, int n_heads, int head_dim, int n_rot,
            bool neox);
  // Writes F32 rows x [n_tokens][n_kv_heads][head_dim] (new K or V) into an F16 cache
  // [n_kv_heads][n_ctx][head_dim] at positions pos0 .. pos0 + n_tokens - 1 (pages: a paged
  // cache [n_kv_heads][pages->n_rows][head_dim], positions < n_ctx through its table).
  void kv_store(Buffer& cache, const Buffer& x, int64_t n_tokens, int pos0, int n_kv_heads, int head_dim, int n_ctx,
                const KvPages* pages = nullptr);
  // Tiled causal attention with an online softmax over KV tiles (prefill). pages: k and v
  // are paged caches (a.n_ctx still bounds the positions).
  void flash_attention(const AttentionShape& a, const Buffer& q, const Buffer& k, const Buffer& v,
                       Buffer& out, const KvPages* pages = nullptr);
  // n_q == 1: the context split in chunks, a partial softmax per chunk, then a combine.
  void flash_decode(const AttentionShape& a, const Buffer& q, const Buffer& k, const Buffer& v,
                    Buffer& scratch, Buffer& out, const KvPages* pages = nullptr);

  // dst[dst_offset ..) = src[src_offset ..), bytes of them (vkCmdCopyBuffer; the backend's
  // gathers of a batch's rows, which the ops above read from offset 0).
  void copy(Buffer& dst, size_t dst_offset, const Buffer& src, size_t src_offset, size_t bytes);

  util::Status submit_and_wait();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kernels::vulkan
