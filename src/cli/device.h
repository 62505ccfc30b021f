// device.h: `--device cpu|vulkan[:N]`: what runs a node's forward pass (model/backend.h).
// Deliberately no device probing here: a Vulkan device is opened when the node's backend
// is made (the factory), so its errors name the device and its memory.
#pragma once
#include <string>

#include "model/backend.h"

namespace cli {

// The backend factory for a --device value (an empty one for cpu: the CPU backend), or an
// error message ("" on success): a malformed value, or vulkan in a build without it.
std::string device_factory(const std::string& device, model::BackendFactory* out);
// What a --device value names ("cpu", or describe() of the Vulkan device), or an error
// message when it is not there (no loader, no device, index out of range); a worker
// checks this at start, before any root connects.
util::Expected<std::string> device_name(const std::string& device);

}  // namespace cli
