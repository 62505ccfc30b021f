// device.cc: `--device` (see device.h). SHARDLM_VULKAN (0 or 1) is set for the shardlm target by
// CMake; with 1 the Vulkan backend (model/vulkan/vulkan_backend.h) is linked.
#include "cli/device.h"

#include <cstdlib>

#if SHARDLM_VULKAN
#include "kernels/vulkan/vulkan.h"
#include "model/vulkan/vulkan_backend.h"
#endif

namespace cli {

namespace {
// The Vulkan device index of a --device value, or an error message in *error.
int vulkan_index(const std::string& device, std::string* error) {
  const std::string kind = device.substr(0, device.find(':'));
  int index = 0;
  if (kind == "vulkan" && device.size() > kind.size()) {
    const std::string n = device.substr(kind.size() + 1);
    char* end = nullptr;
    const long v = std::strtol(n.c_str(), &end, 10);
    if (n.empty() || *end != 0 || v < 0 || v > 1024)
      return *error = "--device " + device + ": the device index must be a number (see `shardlm devices`)", -1;
    index = int(v);
  }
  if (kind != "vulkan")
    return *error = "--device must be cpu, vulkan or vulkan:N (N from `shardlm devices`), not '" + device + "'", -1;
#if !SHARDLM_VULKAN
  return *error = "--device " + device + ": this shardlm was built without Vulkan (configure with "
                  "-DSHARDLM_VULKAN=ON, or use --device cpu)", -1;
#endif
  return index;
}
}  // namespace

std::string device_factory(const std::string& device, model::BackendFactory* out) {
  *out = nullptr;
  if (device == "cpu") return "";
  std::string error;
  const int index = vulkan_index(device, &error);
  if (index < 0) return error;
#if SHARDLM_VULKAN
  *out = [index](const model::Config& cfg, const model::Weights& w, util::ThreadPool&, const model::RunConfig& rc,
                 const model::Partition& part) { return model::make_vulkan_backend(index, cfg, w, rc, part); };
#endif
  return "";
}

util::Expected<std::string> device_name(const std::string& device) {
  if (device == "cpu") return std::string("cpu");
  std::string error;
  const int index = vulkan_index(device, &error);
  if (index < 0) return util::Status::error(error);
#if SHARDLM_VULKAN
  auto devs = kernels::vulkan::list_devices();
  if (!devs) return util::Status::error("--device " + device + ": " + devs.error());
  if (index >= int(devs->size()))
    return util::Status::error("--device " + device + ": there is no Vulkan device " + std::to_string(index) + " (" +
                               std::to_string(devs->size()) + " found; see `shardlm devices`)");
  return kernels::vulkan::describe((*devs)[size_t(index)]);
#else
  return util::Status::error(error);
#endif
}

}  // namespace cli
