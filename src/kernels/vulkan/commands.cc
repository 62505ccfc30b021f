// commands.cc: recording kernel dispatches into one command buffer (vulkan.h Commands):
// descriptor sets from pools owned by the Commands, push constants, a compute barrier
// between consecutive dispatches, one submit.
#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

#include "kernels/vulkan/device_impl.h"

namespace kernels::vulkan {

namespace {

constexpr uint32_t kSetsPerPool = 64;
constexpr uint32_t kMaxGroups = 65535;  // the minimum maxComputeWorkGroupCount Vulkan guarantees
constexpr int kDecodeChunk = 64;        // KV positions per workgroup of flash_decode.comp
constexpr int kPrefillRows = 8;         // query rows per workgroup of flash_attention.comp
constexpr int kMatvecGroup = 64;        // invocations per workgroup of matvec.comp (each matvec_rows rows)
constexpr int kMatmulRows = 64;         // weight rows per workgroup of matmul.comp (its TM)
constexpr int kMatmulCols = 32;         // batch columns per workgroup of matmul.comp (its TN)

uint32_t groups(int64_t n, int64_t per_group) {
  return uint32_t(std::min<int64_t>((n + per_group - 1) / per_group, kMaxGroups));
}

VkBuffer handle(const Buffer& b) { return reinterpret_cast<VkBuffer>(b.vk_handle()); }

// "matvec_q4_k" for (matvec, Q4_K).
std::string typed_name(const char* shader, tensor::Type t) {
  std::string s = std::string(shader) + "_" + tensor::type_name(t);
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// The activation types act_round.comp rounds to (every weight type's vec_dot type but F32).
bool rounds_activations(tensor::Type t) {
  return t == tensor::Type::Q8_0 || t == tensor::Type::Q8_1 || t == tensor::Type::Q8_K || t == tensor::Type::F16 ||
         t == tensor::Type::BF16;
}

int decode_chunks(int n_positions) {
  return (n_positions + kDecodeChunk - 1) / kDecodeChunk;
}

int group_of(const AttentionShape& a) { return a.group > 0 ? a.group : a.n_heads / a.n_kv_heads; }

// The rows of one KV head's plane, after checking a paged cache's table covers positions
// [0, end).
int plane_rows(const KvPages* pages, int n_ctx, int end) {
  if (!pages) return n_ctx;
  CHECK(pages->table && pages->block_rows > 0 && pages->block_rows % kDecodeChunk == 0 && pages->table0 >= 0);
  CHECK(pages->n_rows % pages->block_rows == 0);
  const int blocks = (end + pages->block_rows - 1) / pages->block_rows;
  CHECK(pages->table->bytes() >= size_t(pages->table0 + blocks) * 4);
  return pages->n_rows;
}

// The shaders' (n_rows, block_rows, table0) and the table's binding (the cache when not paged).
struct Paging {
  uint32_t n_rows, block_rows, table0;
  const Buffer* table;
};
Paging paging(const KvPages* pages, int n_ctx, int end, const Buffer& cache) {
  const int rows = plane_rows(pages, n_ctx, end);
  if (!pages) return {uint32_t(rows), 0, 0, &cache};
  return {uint32_t(rows), uint32_t(pages->block_rows), uint32_t(pages->table0), pages->table};
}

Paging check_attention(const AttentionShape& a, const Buffer& k, const Buffer& v, const KvPages* pages) {
  CHECK(a.head_dim % 2 == 0 && a.head_dim <= kMaxHeadDim);
  CHECK(a.n_kv_heads >= 1);
  const int group = group_of(a);
  CHECK(group >= 1 && a.head_offset >= 0 && a.head_offset < group);
  CHECK((a.n_heads - 1 + a.head_offset) / group < a.n_kv_heads);  // every head's KV head is here
  CHECK(a.pos0 + a.n_q <= a.n_ctx);
  const Paging pg = paging(pages, a.n_ctx, a.pos0 + a.n_q, k);
  const size_t cache_bytes = size_t(a.n_kv_heads) * pg.n_rows * a.head_dim * 2;
  CHECK(k.bytes() >= cache_bytes && v.bytes() >= cache_bytes);
  return pg;
}

}  // namespace

bool supports_weight_type(tensor::Type t) {
  using tensor::Type;
  switch (t) {
    case Type::F32: case Type::F16: case Type::BF16: case Type::Q8_0: case Type::Q4_0: case Type::Q4_1:
    case Type::Q5_0: case Type::Q5_1: case Type::Q4_K: case Type::Q5_K: case Type::Q6_K: return true;
    default: return false;
  }
}

size_t flash_decode_scratch_bytes(const AttentionShape& a) {
  return size_t(a.n_heads) * decode_chunks(a.n_ctx) * (2 + a.head_dim) * sizeof(float);
}

struct Commands::Impl {
  Device& dev;
  Device::Impl& d;
  VkCommandBuffer cb = VK_NULL_HANDLE;
  std::vector<VkDescriptorPool> pools;  // reused across recordings
  size_t pool_index = 0;                 // the pool sets come from now
  uint32_t sets_in_pool = 0;
  bool recording = false;
  int n_dispatches = 0;
  Buffer act_scratch[2];            // matmul's rounded activations and Q8_1 sums (grown as needed)
  std::vector<Buffer> act_retired;  // smaller scratches ops recorded before may still read

  explicit Impl(Device& device) : dev(device), d(device.impl()) {}

  // A scratch of at least `bytes` for the ops being recorded (a smaller one is kept until
  // submit_and_wait: ops recorded before may read it).
  Buffer& scratch(int i, size_t bytes) {
    Buffer& s = act_scratch[i];
    if (s.bytes() < bytes) {
      util::Expected<Buffer> b = dev.alloc(std::max(bytes, 2 * s.bytes()), "matmul activations");
      CHECK_MSG(b.ok(), b.error().c_str());
      if (s.bytes() > 0) act_retired.push_back(std::move(s));
      s = std::move(*b);
    }
    return s;
  }

  VkDescriptorSet new_set() {
    if (sets_in_pool == kSetsPerPool) {
      ++pool_index;
      sets_in_pool = 0;
    }
    if (pool_index == pools.size()) {
      VkDescriptorPoolSize size{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, kSetsPerPool * kMaxBindings};
      VkDescriptorPoolCreateInfo ci{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
      ci.maxSets = kSetsPerPool;
      ci.poolSizeCount = 1;
      ci.pPoolSizes = &size;
      VkDescriptorPool pool;
      CHECK(d.vk.vkCreateDescriptorPool(d.device, &ci, nullptr, &pool) == VK_SUCCESS);
      pools.push_back(pool);
    }
    VkDescriptorSetAllocateInfo ai{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
    ai.descriptorPool = pools[pool_index];
    ai.descriptorSetCount = 1;
    ai.pSetLayouts = &d.set_layout;
    VkDescriptorSet set;
    CHECK(d.vk.vkAllocateDescriptorSets(d.device, &ai, &set) == VK_SUCCESS);
    ++sets_in_pool;
    return set;
  }

  // Starts recording, or puts a barrier on everything recorded before (dispatches and
  // copies) ahead of the next op.
  void begin_op() {
    if (!recording) {
      VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
      bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
      CHECK(d.vk.vkBeginCommandBuffer(cb, &bi) == VK_SUCCESS);
      recording = true;
    }
    if (n_dispatches > 0) {
      VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
      mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
      mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT |
                         VK_ACCESS_TRANSFER_WRITE_BIT;
      const VkPipelineStageFlags stages = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
      d.vk.vkCmdPipelineBarrier(cb, stages, stages, 0, 1, &mb, 0, nullptr, 0, nullptr);
    }
  }

  // Records one dispatch of `shader` over the buffers (bindings 0, 1, ...; unused bindings
  // repeat the first buffer) after a barrier on everything recorded before.
  template <typename Push>
  void dispatch(const std::string& shader, std::initializer_list<const Buffer*> buffers, const Push& push,
                uint32_t gx, uint32_t gy = 1, uint32_t gz = 1) {
    static_assert(sizeof(Push) <= kPushBytes);
    CHECK(buffers.size() >= 1 && buffers.size() <= kMaxBindings);
    begin_op();
    VkDescriptorSet set = new_set();
    VkDescriptorBufferInfo infos[kMaxBindings];
    VkWriteDescriptorSet writes[kMaxBindings];
    const Buffer* first = *buffers.begin();
    for (uint32_t b = 0; b < kMaxBindings; ++b) {
      const Buffer* buf = b < buffers.size() ? buffers.begin()[b] : first;
      CHECK(buf->device() == &dev);
      infos[b] = {handle(*buf), 0, VK_WHOLE_SIZE};
      writes[b] = {VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
      writes[b].dstSet = set;
      writes[b].dstBinding = b;
      writes[b].descriptorCount = 1;
      writes[b].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
      writes[b].pBufferInfo = &infos[b];
    }
    d.vk.vkUpdateDescriptorSets(d.device, kMaxBindings, writes, 0, nullptr);
    d.vk.vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, d.pipeline(shader));
    d.vk.vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, d.pipeline_layout, 0, 1, &set, 0, nullptr);
    d.vk.vkCmdPushConstants(cb, d.pipeline_layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof(Push), &push);
    d.vk.vkCmdDispatch(cb, gx, gy, gz);
    ++n_dispatches;
  }
};

Commands::Commands(Device& dev) : impl_(std::make_unique<Impl>(dev)) {
  Device::Impl& d = impl_->d;
  VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  ai.commandPool = d.pool;
  ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  ai.commandBufferCount = 1;
  CHECK(d.vk.vkAllocateCommandBuffers(d.device, &ai, &impl_->cb) == VK_SUCCESS);
}

Commands::~Commands() {
  Device::Impl& d = impl_->d;
  for (VkDescriptorPool p : impl_->pools) d.vk.vkDestroyDescriptorPool(d.device, p, nullptr);
  d.vk.vkFreeCommandBuffers(d.device, d.pool, 1, &impl_->cb);
}

util::Status Commands::submit_and_wait() {
  Impl& m = *impl_;
  if (!m.recording) return util::ok_status();
  CHECK(m.d.vk.vkEndCommandBuffer(m.cb) == VK_SUCCESS);
  util::Status st = m.d.submit_and_wait(m.cb);
  m.d.vk.vkResetCommandBuffer(m.cb, 0);
  for (VkDescriptorPool p : m.pools) m.d.vk.vkResetDescriptorPool(m.d.device, p, 0);
  m.pool_index = 0;
  m.sets_in_pool = 0;
  m.recording = false;
  m.n_dispatches = 0;
  m.act_retired.clear();
  return st;
}

// ---- ops

void Commands::copy(Buffer& dst, size_t dst_offset, const Buffer& src, size_t src_offset, size_t bytes) {
  CHECK(dst.device() == src.device() && dst_offset + bytes <= dst.bytes() && src_offset + bytes <= src.bytes());
  if (bytes == 0) return;
  Impl& m = *impl_;
  m.begin_op();
  VkBufferCopy region{src_offset, dst_offset, bytes};
  m.d.vk.vkCmdCopyBuffer(m.cb, handle(src), handle(dst), 1, &region);
  ++m.n_dispatches;
}

void Commands::round_activations(tensor::Type t, Buffer& out, const Buffer& x, int64_t n, Buffer* sums) {
  CHECK(rounds_activations(t) && n % tensor::traits(t).block_size == 0);
  CHECK(out.bytes() >= size_t(n) * 4 && x.bytes() >= size_t(n) * 4);
  const int64_t n_blocks = n / tensor::traits(t).block_size;
  struct { uint32_t n_blocks; } push{uint32_t(n_blocks)};
  if (t == tensor::Type::Q8_1) {
    CHECK(sums != nullptr && sums->bytes() >= size_t(n_blocks) * 4);
    impl_->dispatch(typed_name("act_round", t), {&out, &x, sums}, push, groups(n_blocks, 64));
  } else {
    impl_->dispatch(typed_name("act_round", t), {&out, &x}, push, groups(n_blocks, 64));
  }
}

void Commands::matmul(tensor::Type wt, const Buffer& W, int64_t rows, int64_t cols, const Buffer& x_in,
                      int64_t n_batch, Buffer& y) {
  CHECK(supports_weight_type(wt) && rows >= 1 && cols % 32 == 0 && n_batch >= 1);
  const size_t row_bytes = tensor::row_bytes(wt, cols);
  CHECK(W.bytes() >= row_bytes * rows && x_in.bytes() >= size_t(n_batch * cols) * 4 &&
        y.bytes() >= size_t(n_batch * rows) * 4);
  // The CPU dots F16 / BF16 / quantized weights with x converted to the vec_dot type: round
  // x to that grid first (cols is a multiple of 256 for the K types, so blocks never span rows).
  // Q8_1 (the Q4_1 and Q5_1 weights') also gives each block's s for the shaders' m * s.
  const tensor::Type at = tensor::traits(wt).vec_dot_type;
  const Buffer* xp = &x_in;
  Buffer* sums = nullptr;
  if (rounds_activations(at)) {
    Buffer& s = impl_->scratch(0, size_t(n_batch * cols) * 4);
    if (at == tensor::Type::Q8_1) sums = &impl_->scratch(1, size_t(n_batch * cols / 32) * 4);
    round_activations(at, s, x_in, n_batch * cols, sums);
    xp = &s;
  }
  const Buffer& x = *xp;
  const Buffer& s = sums ? *sums : x;  // binding 3: read by the Q4_1 and Q5_1 shaders only
  if (n_batch == 1) {
    struct { uint32_t rows, cols, row_bytes; } push{uint32_t(rows), uint32_t(cols), uint32_t(row_bytes)};
    impl_->dispatch(typed_name("matvec", wt), {&W, &x, &y, &s}, push,
                    groups(rows, int64_t(kMatvecGroup) * impl_->d.matvec_rows));
  } else {
    const int64_t row_tiles = (rows + kMatmulRows - 1) / kMatmulRows;
    const int64_t col_tiles = (n_batch + kMatmulCols - 1) / kMatmulCols;
    CHECK(row_tiles <= kMaxGroups && col_tiles <= kMaxGroups);
    struct { uint32_t rows, cols, row_bytes, n_batch; } push{uint32_t(rows), uint32_t(cols), uint32_t(row_bytes),
                                                            uint32_t(n_batch)};
    impl_->dispatch(typed_name("matmul", wt), {&W, &x, &y, &s}, push, uint32_t(row_tiles), uint32_t(col_tiles));
  }
}

void Commands::rmsnorm(Buffer& out, const Buffer& x, const Buffer& w, int64_t n_rows, int64_t n, float eps) {
  CHECK(out.bytes() >= size_t(n_rows * n) * 4 && x.bytes() >= size_t(n_rows * n) * 4 && w.bytes() >= size_t(n) * 4);
  struct { uint32_t n_rows, n; float eps; } push{uint32_t(n_rows), uint32_t(n), eps};
  impl_->dispatch("rmsnorm", {&out, &x, &w}, push, groups(n_rows, 1));
}

void Commands::swiglu(Buffer& out, const Buffer& gate, const Buffer& up, int64_t n) {
  CHECK(out.bytes() >= size_t(n) * 4 && gate.bytes() >= size_t(n) * 4 && up.bytes() >= size_t(n) * 4);
  struct { uint32_t n; } push{uint32_t(n)};
  impl_->dispatch("swiglu", {&out, &gate, &up}, push, groups(n, 256));
}

void Commands::geglu(Buffer& out, const Buffer& gate, const Buffer& up, int64_t n) {
  CHECK(out.bytes() >= size_t(n) * 4 && gate.bytes() >= size_t(n) * 4 && up.bytes() >= size_t(n) * 4);
  struct { uint32_t n; } push{uint32_t(n)};
  impl_->dispatch("geglu", {&out, &gate, &up}, push, groups(n, 256));
}

void Commands::add(Buffer& out, const Buffer& a, const Buffer& b, int64_t n) {
  CHECK(out.bytes() >= size_t(n) * 4 && a.bytes() >= size_t(n) * 4 && b.bytes() >= size_t(n) * 4);
  struct { uint32_t n; } push{uint32_t(n)};
  impl_->dispatch("add", {&out, &a, &b}, push, groups(n, 256));
}

void Commands::softmax(Buffer& x, int64_t n_rows, int64_t n) {
  CHECK(x.bytes() >= size_t(n_rows * n) * 4);
  struct { uint32_t n_rows, n; } push{uint32_t(n_rows), uint32_t(n)};
  impl_->dispatch("softmax", {&x}, push, groups(n_rows, 1));
}

void Commands::rope(Buffer& x, const Buffer& cache, int64_t n_tokens, int n_heads, int head_dim, int n_rot,
                    bool neox) {
  CHECK(n_rot % 2 == 0 && n_rot <= head_dim);
  CHECK(x.bytes() >= size_t(n_tokens * n_heads * head_dim) * 4 && cache.bytes() >= size_t(n_tokens * n_rot) * 4);
  struct { uint32_t n_tokens, n_heads, head_dim, n_rot, neox; } push{uint32_t(n_tokens), uint32_t(n_heads),
                                                                     uint32_t(head_dim), uint32_t(n_rot), neox};
  impl_->dispatch("rope", {&x, &cache}, push, groups(n_tokens * n_heads * (n_rot / 2), 64));
}

void Commands::kv_store(Buffer& cache, const Buffer& x, int64_t n_tokens, int pos0, int n_kv_heads, int head_dim,
                        int n_ctx, const KvPages* pages) {
  CHECK(head_dim % 2 == 0 && pos0 + n_tokens <= n_ctx);
  const Paging pg = paging(pages, n_ctx, int(pos0 + n_tokens), cache);
  CHECK(cache.bytes() >= size_t(n_kv_heads) * pg.n_rows * head_dim * 2 &&
        x.bytes() >= size_t(n_tokens * n_kv_heads * head_dim) * 4);
  struct { uint32_t n_tokens, pos0, n_kv_heads, head_dim, n_rows, block_rows, table0; } push{
      uint32_t(n_tokens), uint32_t(pos0), uint32_t(n_kv_heads), uint32_t(head_dim), pg.n_rows, pg.block_rows,
      pg.table0};
  impl_->dispatch("kv_store", {&cache, &x, pg.table}, push, groups(n_tokens * n_kv_heads * head_dim / 2, 64));
}

void Commands::flash_attention(const AttentionShape& a, const Buffer& q, const Buffer& k, const Buffer& v,
                               Buffer& out, const KvPages* pages) {
  const Paging pg = check_attention(a, k, v, pages);
  const size_t q_bytes = size_t(a.n_q) * a.n_heads * a.head_dim * 4;
  CHECK(q.bytes() >= q_bytes && out.bytes() >= q_bytes);
  CHECK((a.n_q + kPrefillRows - 1) / kPrefillRows <= int(kMaxGroups));
  struct {
    uint32_t n_q, pos0, n_heads, group, head_offset, head_dim, n_rows;
    float scale;
    uint32_t window, block_rows, table0;
  } push{uint32_t(a.n_q), uint32_t(a.pos0), uint32_t(a.n_heads), uint32_t(group_of(a)), uint32_t(a.head_offset),
         uint32_t(a.head_dim), pg.n_rows, a.scale, uint32_t(a.window), pg.block_rows, pg.table0};
  impl_->dispatch("flash_attention", {&q, &k, &v, &out, pg.table}, push, groups(a.n_q, kPrefillRows),
                  uint32_t(a.n_heads));
}

void Commands::flash_decode(const AttentionShape& a, const Buffer& q, const Buffer& k, const Buffer& v,
                            Buffer& scratch, Buffer& out, const KvPages* pages) {
  const Paging pg = check_attention(a, k, v, pages);
  CHECK(a.n_q == 1);
  const size_t q_bytes = size_t(a.n_heads) * a.head_dim * 4;
  CHECK(q.bytes() >= q_bytes && out.bytes() >= q_bytes && scratch.bytes() >= flash_decode_scratch_bytes(a));
  const int n_chunks = decode_chunks(a.pos0 + 1);
  struct {
    uint32_t pos0, n_heads, group, head_offset, head_dim, n_rows, n_chunks;
    float scale;
    uint32_t window, block_rows, table0;
  } push{uint32_t(a.pos0), uint32_t(a.n_heads), uint32_t(group_of(a)), uint32_t(a.head_offset), uint32_t(a.head_dim),
         pg.n_rows, uint32_t(n_chunks), a.scale, uint32_t(a.window), pg.block_rows, pg.table0};
  impl_->dispatch("flash_decode", {&q, &k, &v, &scratch, pg.table}, push, uint32_t(n_chunks), uint32_t(a.n_heads));
  struct { uint32_t head_dim, n_chunks; } combine{uint32_t(a.head_dim), uint32_t(n_chunks)};
  impl_->dispatch("flash_decode_combine", {&scratch, &out}, combine, uint32_t(a.n_heads));
}

}  // namespace kernels::vulkan
