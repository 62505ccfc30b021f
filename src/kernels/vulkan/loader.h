// loader.h: the Vulkan loader (libvulkan.so.1) opened with dlopen at run time and the
// entry points shardlm uses, fetched through vkGetInstanceProcAddr into one table. The
// binary therefore starts on machines without Vulkan; only asking for a device fails, with
// a message saying what to install. Internal to kernels/vulkan (vulkan.h is the interface).
// Deliberately not here: layers, surfaces, anything graphics.
#pragma once
#define VK_NO_PROTOTYPES
#include <vulkan/vulkan_core.h>

#include "util/status.h"

namespace kernels::vulkan {

// X-macro lists: global functions (no instance), then instance-level ones (device
// functions are also fetched through the instance: one table for everything).
#define SHARDLM_VK_GLOBAL_FUNCS(X) \
  X(vkCreateInstance)              \
  X(vkEnumerateInstanceVersion)
#define SHARDLM_VK_INSTANCE_FUNCS(X)         \
  X(vkDestroyInstance)                       \
  X(vkEnumeratePhysicalDevices)              \
  X(vkGetPhysicalDeviceProperties)           \
  X(vkGetPhysicalDeviceProperties2)          \
  X(vkGetPhysicalDeviceMemoryProperties)     \
  X(vkGetPhysicalDeviceQueueFamilyProperties) \
  X(vkEnumerateDeviceExtensionProperties)    \
  X(vkCreateDevice)                          \
  X(vkDestroyDevice)                         \
  X(vkGetDeviceQueue)                        \
  X(vkCreateBuffer)                          \
  X(vkDestroyBuffer)                         \
  X(vkGetBufferMemoryRequirements)           \
  X(vkAllocateMemory)                        \
  X(vkFreeMemory)                            \
  X(vkBindBufferMemory)                      \
  X(vkMapMemory)                             \
  X(vkUnmapMemory)                           \
  X(vkCreateShaderModule)                    \
  X(vkDestroyShaderModule)                   \
  X(vkCreateDescriptorSetLayout)             \
  X(vkDestroyDescriptorSetLayout)            \
  X(vkCreatePipelineLayout)                  \
  X(vkDestroyPipelineLayout)                 \
  X(vkCreateComputePipelines)                \
  X(vkDestroyPipeline)                       \
  X(vkCreateDescriptorPool)                  \
  X(vkDestroyDescriptorPool)                 \
  X(vkResetDescriptorPool)                   \
  X(vkAllocateDescriptorSets)                \
  X(vkUpdateDescriptorSets)                  \
  X(vkCreateCommandPool)                     \
  X(vkDestroyCommandPool)                    \
  X(vkAllocateCommandBuffers)                \
  X(vkFreeCommandBuffers)                    \
  X(vkBeginCommandBuffer)                    \
  X(vkEndCommandBuffer)                      \
  X(vkResetCommandBuffer)                    \
  X(vkCmdBindPipeline)                       \
  X(vkCmdBindDescriptorSets)                 \
  X(vkCmdPushConstants)                      \
  X(vkCmdDispatch)                           \
  X(vkCmdPipelineBarrier)                    \
  X(vkCmdCopyBuffer)                         \
  X(vkQueueSubmit)                           \
  X(vkCreateFence)                           \
  X(vkDestroyFence)                          \
  X(vkWaitForFences)                         \
  X(vkResetFences)

struct Vk {
#define SHARDLM_VK_MEMBER(name) PFN_##name name = nullptr;
  PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr = nullptr;
  SHARDLM_VK_GLOBAL_FUNCS(SHARDLM_VK_MEMBER)
  SHARDLM_VK_INSTANCE_FUNCS(SHARDLM_VK_MEMBER)
#undef SHARDLM_VK_MEMBER
};

// The loaded library with its global functions (opened once per process, never closed:
// drivers keep threads and atexit handlers). Error: no loader, or one without Vulkan 1.1.
util::Expected<const Vk*> load_vulkan();
// Fills the instance-level entries of a copy of the global table for `instance`.
util::Status load_instance_functions(VkInstance instance, Vk& vk);
// "VK_ERROR_OUT_OF_DEVICE_MEMORY" etc.
const char* result_name(VkResult r);

}  // namespace kernels::vulkan
