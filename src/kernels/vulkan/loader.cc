// loader.cc: dlopen("libvulkan.so.1") and the function table of loader.h.
#include "kernels/vulkan/loader.h"

#include <dlfcn.h>

#include <string>

namespace kernels::vulkan {

namespace {

constexpr const char* kLoaderName = "libvulkan.so.1";

util::Expected<const Vk*> open_loader() {
  void* lib = dlopen(kLoaderName, RTLD_NOW | RTLD_LOCAL);
  if (!lib)
    return util::Status::error(std::string("no Vulkan loader (") + kLoaderName +
                               "): install libvulkan1 and a driver, e.g. mesa-vulkan-drivers");
  static Vk vk;
  vk.vkGetInstanceProcAddr = reinterpret_cast<PFN_vkGetInstanceProcAddr>(dlsym(lib, "vkGetInstanceProcAddr"));
  if (!vk.vkGetInstanceProcAddr)
    return util::Status::error(std::string(kLoaderName) + " has no vkGetInstanceProcAddr: reinstall libvulkan1");
#define SHARDLM_VK_LOAD(name) \
  vk.name = reinterpret_cast<PFN_##name>(vk.vkGetInstanceProcAddr(VK_NULL_HANDLE, #name));
  SHARDLM_VK_GLOBAL_FUNCS(SHARDLM_VK_LOAD)
#undef SHARDLM_VK_LOAD
  uint32_t version = VK_API_VERSION_1_0;
  if (vk.vkEnumerateInstanceVersion) vk.vkEnumerateInstanceVersion(&version);
  if (!vk.vkCreateInstance || version < VK_API_VERSION_1_1)
    return util::Status::error(std::string("the Vulkan loader ") + kLoaderName +
                               " is older than Vulkan 1.1: install a newer libvulkan1");
  return static_cast<const Vk*>(&vk);
}

}  // namespace

util::Expected<const Vk*> load_vulkan() {
  static const util::Expected<const Vk*> loaded = open_loader();
  return loaded;
}

util::Status load_instance_functions(VkInstance instance, Vk& vk) {
#define SHARDLM_VK_LOAD(name)                                                                  \
  vk.name = reinterpret_cast<PFN_##name>(vk.vkGetInstanceProcAddr(instance, #name));           \
  if (!vk.name) return util::Status::error("the Vulkan driver lacks " #name ": update the driver");
  SHARDLM_VK_INSTANCE_FUNCS(SHARDLM_VK_LOAD)
#undef SHARDLM_VK_LOAD
  return util::ok_status();
}

const char* result_name(VkResult r) {
  switch (r) {
    case VK_SUCCESS: return "VK_SUCCESS";
    case VK_TIMEOUT: return "VK_TIMEOUT";
    case VK_ERROR_OUT_OF_HOST_MEMORY: return "VK_ERROR_OUT_OF_HOST_MEMORY";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY: return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
    case VK_ERROR_INITIALIZATION_FAILED: return "VK_ERROR_INITIALIZATION_FAILED";
    case VK_ERROR_DEVICE_LOST: return "VK_ERROR_DEVICE_LOST";
    case VK_ERROR_MEMORY_MAP_FAILED: return "VK_ERROR_MEMORY_MAP_FAILED";
    case VK_ERROR_EXTENSION_NOT_PRESENT: return "VK_ERROR_EXTENSION_NOT_PRESENT";
    case VK_ERROR_FEATURE_NOT_PRESENT: return "VK_ERROR_FEATURE_NOT_PRESENT";
    case VK_ERROR_INCOMPATIBLE_DRIVER: return "VK_ERROR_INCOMPATIBLE_DRIVER";
    case VK_ERROR_OUT_OF_POOL_MEMORY: return "VK_ERROR_OUT_OF_POOL_MEMORY";
    default: return "VkResult error";
  }
}

}  // namespace kernels::vulkan
