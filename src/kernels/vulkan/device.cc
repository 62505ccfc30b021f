// device.cc: instance creation, device enumeration and opening, pipelines from the
// embedded SPIR-V, buffers and host copies (vulkan.h).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string_view>
#include <vector>

#include "kernels/vulkan/device_impl.h"
#include "kernels/vulkan/shaders.h"

namespace kernels::vulkan {

namespace {

// matvec.comp's rows per invocation on a CPU device (lavapipe), where an activation read
// costs as much when every invocation reads the same word: 8 rows share one read of the
// activations (the shader's header has the measurements). GPUs get 1.
constexpr uint32_t kMatvecRowsOnCpu = 8;

util::Status vk_error(const std::string& what, VkResult r) {
  return util::Status::error(what + " failed: " + result_name(r));
}

// An instance with the function table filled in; the caller destroys it.
util::Status create_instance(Vk& vk, VkInstance& instance) {
  util::Expected<const Vk*> loaded = load_vulkan();
  if (!loaded) return loaded.status();
  vk = **loaded;
  VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
  app.pApplicationName = "shardlm";
  app.apiVersion = VK_API_VERSION_1_1;
  VkInstanceCreateInfo ci{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
  ci.pApplicationInfo = &app;
  if (VkResult r = vk.vkCreateInstance(&ci, nullptr, &instance); r != VK_SUCCESS)
    return util::Status::error(std::string("cannot create a Vulkan instance (") + result_name(r) +
                               "): is a Vulkan driver installed? e.g. mesa-vulkan-drivers");
  return load_instance_functions(instance, vk);
}

const char* type_name(VkPhysicalDeviceType t) {
  switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete GPU";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated GPU";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual GPU";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "CPU";
    default: return "other";
  }
}

DeviceInfo query_info(const Vk& vk, VkPhysicalDevice pd, int index) {
  VkPhysicalDeviceSubgroupProperties subgroup{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
  VkPhysicalDeviceProperties2 props{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
  props.pNext = &subgroup;
  vk.vkGetPhysicalDeviceProperties2(pd, &props);
  VkPhysicalDeviceMemoryProperties mem;
  vk.vkGetPhysicalDeviceMemoryProperties(pd, &mem);
  DeviceInfo info;
  info.index = index;
  info.name = props.properties.deviceName;
  info.type = type_name(props.properties.deviceType);
  for (uint32_t h = 0; h < mem.memoryHeapCount; ++h)
    if (mem.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT)
      info.memory_bytes = std::max<uint64_t>(info.memory_bytes, mem.memoryHeaps[h].size);
  info.max_buffer_bytes = props.properties.limits.maxStorageBufferRange;
  info.subgroup_size = subgroup.subgroupSize;
  uint32_t n_ext = 0;
  vk.vkEnumerateDeviceExtensionProperties(pd, nullptr, &n_ext, nullptr);
  std::vector<VkExtensionProperties> exts(n_ext);
  vk.vkEnumerateDeviceExtensionProperties(pd, nullptr, &n_ext, exts.data());
  for (const VkExtensionProperties& e : exts)
    if (std::strcmp(e.extensionName, "VK_KHR_cooperative_matrix") == 0) info.cooperative_matrix = true;
  return info;
}

util::Expected<std::vector<VkPhysicalDevice>> physical_devices(const Vk& vk, VkInstance instance) {
  uint32_t n = 0;
  if (VkResult r = vk.vkEnumeratePhysicalDevices(instance, &n, nullptr); r != VK_SUCCESS)
    return vk_error("vkEnumeratePhysicalDevices", r);
  std::vector<VkPhysicalDevice> pds(n);
  vk.vkEnumeratePhysicalDevices(instance, &n, pds.data());
  pds.resize(n);
  return pds;
}

// Index of a memory type allowed by `bits` with all of `want`, or -1.
int find_memory_type(const VkPhysicalDeviceMemoryProperties& mem, uint32_t bits, VkMemoryPropertyFlags want) {
  for (uint32_t i = 0; i < mem.memoryTypeCount; ++i)
    if ((bits & (1u << i)) && (mem.memoryTypes[i].propertyFlags & want) == want) return int(i);
  return -1;
}

std::string gib(uint64_t bytes) {
  char s[32];
  std::snprintf(s, sizeof s, "%.1f GiB", double(bytes) / double(1ull << 30));
  return s;
}

}  // namespace

std::string describe(const DeviceInfo& info) {
  return "Vulkan device " + std::to_string(info.index) + " (" + info.name + ", " + gib(info.memory_bytes) +
         " of device memory)";
}

util::Expected<std::vector<DeviceInfo>> list_devices() {
  Vk vk;
  VkInstance instance = VK_NULL_HANDLE;
  util::Status st = create_instance(vk, instance);
  std::vector<DeviceInfo> out;
  if (st.ok()) {
    util::Expected<std::vector<VkPhysicalDevice>> pds = physical_devices(vk, instance);
    if (pds)
      for (size_t i = 0; i < pds->size(); ++i) out.push_back(query_info(vk, (*pds)[i], int(i)));
    else
      st = pds.status();
  }
  if (instance && vk.vkDestroyInstance) vk.vkDestroyInstance(instance, nullptr);
  if (!st.ok()) return st;
  return out;
}

// ---- Device

util::Expected<std::unique_ptr<Device>> Device::open(int index, const OpenOptions& opts) {
  std::unique_ptr<Device> dev(new Device);
  dev->impl_ = std::make_unique<Impl>();
  Impl& d = *dev->impl_;
  RETURN_IF_ERROR(create_instance(d.vk, d.instance));
  const Vk& vk = d.vk;
  util::Expected<std::vector<VkPhysicalDevice>> pds = physical_devices(vk, d.instance);
  if (!pds) return pds.status();
  if (index < 0 || index >= int(pds->size()))
    return util::Status::error("no Vulkan device " + std::to_string(index) + ": the loader found " +
                               std::to_string(pds->size()) + " (run `shardlm devices`)");
  d.physical = (*pds)[index];
  dev->info_ = query_info(vk, d.physical, index);
  VkPhysicalDeviceProperties props;
  vk.vkGetPhysicalDeviceProperties(d.physical, &props);
  d.limits = props.limits;
  vk.vkGetPhysicalDeviceMemoryProperties(d.physical, &d.memory);
  const bool unified = props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU ||
                       props.deviceType == VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU;
  d.staging = !unified || opts.force_staging;
  d.matvec_rows = opts.matvec_rows > 0                              ? opts.matvec_rows
                  : props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU ? kMatvecRowsOnCpu
                                                                    : 1;

  uint32_t n_fam = 0;
  vk.vkGetPhysicalDeviceQueueFamilyProperties(d.physical, &n_fam, nullptr);
  std::vector<VkQueueFamilyProperties> fams(n_fam);
  vk.vkGetPhysicalDeviceQueueFamilyProperties(d.physical, &n_fam, fams.data());
  d.queue_family = n_fam;
  for (uint32_t f = 0; f < n_fam && d.queue_family == n_fam; ++f)
    if (fams[f].queueFlags & VK_QUEUE_COMPUTE_BIT) d.queue_family = f;
  if (d.queue_family == n_fam) return util::Status::error(describe(dev->info_) + " has no compute queue");

  const float priority = 1.0f;
  VkDeviceQueueCreateInfo qci{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
  qci.queueFamilyIndex = d.queue_family;
  qci.queueCount = 1;
  qci.pQueuePriorities = &priority;
  VkDeviceCreateInfo dci{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
  dci.queueCreateInfoCount = 1;
  dci.pQueueCreateInfos = &qci;
  if (VkResult r = vk.vkCreateDevice(d.physical, &dci, nullptr, &d.device); r != VK_SUCCESS)
    return vk_error("vkCreateDevice on " + describe(dev->info_), r);
  vk.vkGetDeviceQueue(d.device, d.queue_family, 0, &d.queue);

  VkCommandPoolCreateInfo pci{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  pci.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  pci.queueFamilyIndex = d.queue_family;
  if (VkResult r = vk.vkCreateCommandPool(d.device, &pci, nullptr, &d.pool); r != VK_SUCCESS)
    return vk_error("vkCreateCommandPool", r);
  VkFenceCreateInfo fci{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  if (VkResult r = vk.vkCreateFence(d.device, &fci, nullptr, &d.fence); r != VK_SUCCESS)
    return vk_error("vkCreateFence", r);

  VkDescriptorSetLayoutBinding bindings[kMaxBindings];
  for (uint32_t b = 0; b < kMaxBindings; ++b)
    bindings[b] = {b, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, nullptr};
  VkDescriptorSetLayoutCreateInfo lci{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
  lci.bindingCount = kMaxBindings;
  lci.pBindings = bindings;
  if (VkResult r = vk.vkCreateDescriptorSetLayout(d.device, &lci, nullptr, &d.set_layout); r != VK_SUCCESS)
    return vk_error("vkCreateDescriptorSetLayout", r);
  VkPushConstantRange push{VK_SHADER_STAGE_COMPUTE_BIT, 0, kPushBytes};
  VkPipelineLayoutCreateInfo plci{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
  plci.setLayoutCount = 1;
  plci.pSetLayouts = &d.set_layout;
  plci.pushConstantRangeCount = 1;
  plci.pPushConstantRanges = &push;
  if (VkResult r = vk.vkCreatePipelineLayout(d.device, &plci, nullptr, &d.pipeline_layout); r != VK_SUCCESS)
    return vk_error("vkCreatePipelineLayout", r);

  for (size_t s = 0; s < kNumShaders; ++s) {
    const ShaderCode& code = kShaders[s];
    VkShaderModuleCreateInfo mci{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
    mci.codeSize = code.n_words * 4;
    mci.pCode = code.words;
    VkShaderModule module;
    if (VkResult r = vk.vkCreateShaderModule(d.device, &mci, nullptr, &module); r != VK_SUCCESS)
      return vk_error(std::string("vkCreateShaderModule for ") + code.name, r);
    VkComputePipelineCreateInfo cpci{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
    cpci.stage = {VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO};
    cpci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
    cpci.stage.module = module;
    cpci.stage.pName = "main";
    const VkSpecializationMapEntry entry{0, 0, sizeof(uint32_t)};
    const VkSpecializationInfo spec{1, &entry, sizeof(uint32_t), &d.matvec_rows};
    if (std::string_view(code.name).starts_with("matvec_")) cpci.stage.pSpecializationInfo = &spec;
    cpci.layout = d.pipeline_layout;
    VkPipeline pipeline;
    VkResult r = vk.vkCreateComputePipelines(d.device, VK_NULL_HANDLE, 1, &cpci, nullptr, &pipeline);
    vk.vkDestroyShaderModule(d.device, module, nullptr);
    if (r != VK_SUCCESS) return vk_error(std::string("creating the pipeline ") + code.name, r);
    d.pipelines[code.name] = pipeline;
  }
  return dev;
}

Device::~Device() {
  if (!impl_) return;
  Impl& d = *impl_;
  const Vk& vk = d.vk;
  if (d.device) {
    for (auto& [name, p] : d.pipelines) vk.vkDestroyPipeline(d.device, p, nullptr);
    if (d.pipeline_layout) vk.vkDestroyPipelineLayout(d.device, d.pipeline_layout, nullptr);
    if (d.set_layout) vk.vkDestroyDescriptorSetLayout(d.device, d.set_layout, nullptr);
    if (d.fence) vk.vkDestroyFence(d.device, d.fence, nullptr);
    if (d.pool) vk.vkDestroyCommandPool(d.device, d.pool, nullptr);
    vk.vkDestroyDevice(d.device, nullptr);
  }
  if (d.instance && vk.vkDestroyInstance) vk.vkDestroyInstance(d.instance, nullptr);
}

VkPipeline Device::Impl::pipeline(const std::string& name) const {
  auto it = pipelines.find(name);
  CHECK(it != pipelines.end());
  return it->second;
}

util::Status Device::Impl::submit_and_wait(VkCommandBuffer cb) {
  VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  si.commandBufferCount = 1;
  si.pCommandBuffers = &cb;
  if (VkResult r = vk.vkQueueSubmit(queue, 1, &si, fence); r != VK_SUCCESS) return vk_error("vkQueueSubmit", r);
  VkResult r = vk.vkWaitForFences(device, 1, &fence, VK_TRUE, UINT64_MAX);
  vk.vkResetFences(device, 1, &fence);
  if (r != VK_SUCCESS) return vk_error("vkWaitForFences", r);
  return util::ok_status();
}

// ---- buffers

namespace {

struct RawBuffer {
  VkBuffer buffer = VK_NULL_HANDLE;
  VkDeviceMemory memory = VK_NULL_HANDLE;
  void* mapped = nullptr;
};

// A buffer in memory with `want` properties; mapped when host-visible.
util::Status make_buffer(const Device::Impl& d, const DeviceInfo& info, size_t bytes, VkBufferUsageFlags usage,
                         VkMemoryPropertyFlags want, const std::string& what, RawBuffer& out) {
  const Vk& vk = d.vk;
  VkBufferCreateInfo bci{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  bci.size = bytes;
  bci.usage = usage;
  bci.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  if (VkResult r = vk.vkCreateBuffer(d.device, &bci, nullptr, &out.buffer); r != VK_SUCCESS)
    return vk_error("creating a buffer for " + what + " on " + describe(info), r);
  VkMemoryRequirements req;
  vk.vkGetBufferMemoryRequirements(d.device, out.buffer, &req);
  const int type = find_memory_type(d.memory, req.memoryTypeBits, want);
  if (type < 0) return util::Status::error(describe(info) + " has no suitable memory type for " + what);
  VkMemoryAllocateInfo mai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
  mai.allocationSize = req.size;
  mai.memoryTypeIndex = uint32_t(type);
  if (VkResult r = vk.vkAllocateMemory(d.device, &mai, nullptr, &out.memory); r != VK_SUCCESS)
    return util::Status::error("cannot allocate " + std::to_string(bytes >> 20) + " MiB for " + what + " on " +
                               describe(info) + ": " + result_name(r));
  vk.vkBindBufferMemory(d.device, out.buffer, out.memory, 0);
  if (want & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT)
    if (VkResult r = vk.vkMapMemory(d.device, out.memory, 0, VK_WHOLE_SIZE, 0, &out.mapped); r != VK_SUCCESS)
      return vk_error("vkMapMemory", r);
  return util::ok_status();
}

void free_buffer(const Device::Impl& d, RawBuffer& b) {
  if (b.buffer) d.vk.vkDestroyBuffer(d.device, b.buffer, nullptr);
  if (b.memory) d.vk.vkFreeMemory(d.device, b.memory, nullptr);  // unmaps too
  b = RawBuffer{};
}

constexpr VkMemoryPropertyFlags kHostMemory =
    VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;

}  // namespace

util::Status Device::check_fits(uint64_t bytes, const std::string& what) const {
  if (bytes <= info_.memory_bytes) return util::ok_status();
  return util::Status::error(what + " needs " + gib(bytes) + " but " + describe(info_) +
                             " cannot hold it: use fewer layers or another device (`shardlm devices`)");
}

util::Expected<Buffer> Device::alloc(size_t bytes, const std::string& what) {
  const Impl& d = *impl_;
  bytes = (std::max<size_t>(bytes, 1) + 15) / 16 * 16;
  RETURN_IF_ERROR(check_fits(bytes, what));
  if (bytes > d.limits.maxStorageBufferRange)
    return util::Status::error(what + " needs " + std::to_string(bytes >> 20) + " MiB but " + describe(info_) +
                               " takes at most " + std::to_string(d.limits.maxStorageBufferRange >> 20) +
                               " MiB in one buffer");
  const VkBufferUsageFlags usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                   VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  const VkMemoryPropertyFlags want =
      VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT | (d.staging ? 0 : kHostMemory);
  RawBuffer raw;
  util::Status st = make_buffer(d, info_, bytes, usage, want, what, raw);
  if (!st.ok()) {
    free_buffer(d, raw);
    return st;
  }
  Buffer b;
  b.dev_ = this;
  b.buffer_ = reinterpret_cast<uint64_t>(raw.buffer);
  b.memory_ = reinterpret_cast<uint64_t>(raw.memory);
  b.mapped_ = raw.mapped;
  b.bytes_ = bytes;
  return b;
}

void Device::release(Buffer& b) {
  RawBuffer raw{reinterpret_cast<VkBuffer>(b.buffer_), reinterpret_cast<VkDeviceMemory>(b.memory_), b.mapped_};
  free_buffer(*impl_, raw);
}

namespace {

// Copies `bytes` between a staging buffer and `device_buffer` at `offset` on the queue.
util::Status staged_copy(Device::Impl& d, VkBuffer staging, VkBuffer device_buffer, size_t bytes, size_t offset,
                         bool to_device) {
  VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  ai.commandPool = d.pool;
  ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  ai.commandBufferCount = 1;
  VkCommandBuffer cb;
  if (VkResult r = d.vk.vkAllocateCommandBuffers(d.device, &ai, &cb); r != VK_SUCCESS)
    return vk_error("vkAllocateCommandBuffers", r);
  VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  d.vk.vkBeginCommandBuffer(cb, &bi);
  const VkBufferCopy region{to_device ? 0 : offset, to_device ? offset : 0, bytes};
  d.vk.vkCmdCopyBuffer(cb, to_device ? staging : device_buffer, to_device ? device_buffer : staging, 1, &region);
  d.vk.vkEndCommandBuffer(cb);
  util::Status st = d.submit_and_wait(cb);
  d.vk.vkFreeCommandBuffers(d.device, d.pool, 1, &cb);
  return st;
}

}  // namespace

util::Status Device::upload(Buffer& dst, const void* src, size_t bytes, size_t offset) {
  CHECK(dst.dev_ == this && offset + bytes <= dst.bytes_);
  if (bytes == 0) return util::ok_status();
  if (dst.mapped_) {
    std::memcpy(static_cast<uint8_t*>(dst.mapped_) + offset, src, bytes);
    return util::ok_status();
  }
  RawBuffer staging;
  util::Status st = make_buffer(*impl_, info_, bytes, VK_BUFFER_USAGE_TRANSFER_SRC_BIT, kHostMemory,
                                "a staging copy", staging);
  if (st.ok()) {
    std::memcpy(staging.mapped, src, bytes);
    st = staged_copy(*impl_, staging.buffer, reinterpret_cast<VkBuffer>(dst.buffer_), bytes, offset, true);
  }
  free_buffer(*impl_, staging);
  return st;
}

util::Status Device::download(const Buffer& src, void* dst, size_t bytes, size_t offset) const {
  CHECK(src.dev_ == this && offset + bytes <= src.bytes_);
  if (bytes == 0) return util::ok_status();
  if (src.mapped_) {
    std::memcpy(dst, static_cast<const uint8_t*>(src.mapped_) + offset, bytes);
    return util::ok_status();
  }
  RawBuffer staging;
  util::Status st = make_buffer(*impl_, info_, bytes, VK_BUFFER_USAGE_TRANSFER_DST_BIT, kHostMemory,
                                "a staging copy", staging);
  if (st.ok()) st = staged_copy(*impl_, staging.buffer, reinterpret_cast<VkBuffer>(src.buffer_), bytes, offset, false);
  if (st.ok()) std::memcpy(dst, staging.mapped, bytes);
  free_buffer(*impl_, staging);
  return st;
}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    if (dev_) dev_->release(*this);
    dev_ = o.dev_;
    buffer_ = o.buffer_;
    memory_ = o.memory_;
    mapped_ = o.mapped_;
    bytes_ = o.bytes_;
    o.dev_ = nullptr;
    o.buffer_ = o.memory_ = 0;
    o.mapped_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

Buffer::~Buffer() {
  if (dev_) dev_->release(*this);
}

}  // namespace kernels::vulkan
