// api_fuzz.cc: libFuzzer target for the HTTP APIs' body parsers (serve/api.h, ollama.h,
// anthropic.h, responses.h, infill.h, /tokenize and /detokenize): the first byte picks the entry point (api_entry.h),
// the rest is the body. Nothing may crash, hang or read out of bounds; a body either parses
// or gets a 4xx with a message.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "api_entry.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  auto e = serve::parse_api_entry(data[0], body);
  if (e && (e->status < 400 || e->status > 499 || e->message.empty())) std::abort();
  return 0;
}
