// device_impl.h: what an open Device holds (Vulkan handles, memory types, pipelines),
// shared by device.cc (opening, buffers, copies) and commands.cc (recording dispatches).
// Internal to kernels/vulkan.
#pragma once
#include <map>
#include <string>

#include "kernels/vulkan/loader.h"
#include "kernels/vulkan/vulkan.h"

namespace kernels::vulkan {

// Every pipeline takes up to kMaxBindings storage buffers (bindings 0..) and up to
// kPushBytes of push constants: one descriptor set layout and pipeline layout for all.
constexpr uint32_t kMaxBindings = 5;
constexpr uint32_t kPushBytes = 64;

struct Device::Impl {
  Vk vk;
  VkInstance instance = VK_NULL_HANDLE;
  VkPhysicalDevice physical = VK_NULL_HANDLE;
  VkDevice device = VK_NULL_HANDLE;
  VkQueue queue = VK_NULL_HANDLE;
  uint32_t queue_family = 0;
  VkPhysicalDeviceMemoryProperties memory{};
  VkPhysicalDeviceLimits limits{};
  bool staging = false;  // storage buffers are not host-visible: copy through staging
  uint32_t matvec_rows = 1;  // rows per invocation of matvec.comp (its constant_id 0; device.cc)
  VkDescriptorSetLayout set_layout = VK_NULL_HANDLE;
  VkPipelineLayout pipeline_layout = VK_NULL_HANDLE;
  std::map<std::string, VkPipeline> pipelines;  // by shader name
  VkCommandPool pool = VK_NULL_HANDLE;          // command buffers of Commands and copies
  VkFence fence = VK_NULL_HANDLE;

  VkPipeline pipeline(const std::string& name) const;  // CHECKs it exists
  // Submits one recorded command buffer and waits for it.
  util::Status submit_and_wait(VkCommandBuffer cb);
};

}  // namespace kernels::vulkan
