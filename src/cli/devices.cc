// devices.cc: `shardlm devices`: what this machine can compute on: the CPU (the kernel ISA
// dispatch picks, hardware threads) and each Vulkan device (index for --device vulkan:N,
// name, type, memory, subgroup size, cooperative matrices). Without a Vulkan loader, a
// device, or a build with SHARDLM_VULKAN, it prints the CPU and says why there is no more.
#include <cstdio>
#include <thread>

#include "cli/commands.h"
#include "kernels/kernels.h"
#if SHARDLM_VULKAN
#include "kernels/vulkan/vulkan.h"
#endif

namespace cli {

namespace {

void print_vulkan() {
#if SHARDLM_VULKAN
  util::Expected<std::vector<kernels::vulkan::DeviceInfo>> devices = kernels::vulkan::list_devices();
  if (!devices) {
    std::printf("vulkan: none (%s)\n", devices.error().c_str());
    return;
  }
  if (devices->empty()) std::printf("vulkan: none (the loader found no device: install a driver, e.g. mesa-vulkan-drivers)\n");
  for (const kernels::vulkan::DeviceInfo& d : *devices)
    std::printf("vulkan:%d  %s  (%s, %.1f GiB, largest buffer %.0f MiB, subgroup %u, cooperative matrix %s)\n", d.index,
                d.name.c_str(), d.type.c_str(), double(d.memory_bytes) / double(1ull << 30),
                double(d.max_buffer_bytes) / double(1ull << 20), d.subgroup_size, d.cooperative_matrix ? "yes" : "no");
#else
  std::printf("vulkan: not built in (configure with -DSHARDLM_VULKAN=ON)\n");
#endif
}

}  // namespace

Command add_devices(CLI::App& app) {
  app.add_subcommand("devices", "list the CPU and the Vulkan devices this machine can compute on");
  return []() {
    // The table in use (SHARDLM_ISA, or a table that failed its start-up self-test, may
    // leave a lower one than the best the CPU has).
    const kernels::Isa active = kernels::active_isa(), best = kernels::detected_isa();
    const char* why = kernels::isa_supported(best) ? " (SHARDLM_ISA; best here: " : " (failed its self-test: ";
    std::printf("cpu  %s kernels%s%s%s%s, %u hardware threads\n", kernels::isa_name(active),
                kernels::kquant_width_note().c_str(), active != best ? why : "",
                active != best ? kernels::isa_name(best) : "", active != best ? ")" : "",
                std::thread::hardware_concurrency());
    print_vulkan();
    return 0;
  };
}

}  // namespace cli
