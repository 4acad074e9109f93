// libFuzzer target for the safetensors header parser (built with -DDEEPINFER_FUZZ=ON; see
// tools/fuzz/run-safetensors-fuzz.sh). The input is treated twice: as a whole file image
// (length prefix + header + data) and as bare header JSON over a data section of its own
// size. Any crash, sanitizer report, hang or leak is a bug: bad input must give a Status.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  auto file = deepinfer::io::ParseSafetensors(bytes, "fuzz.safetensors");
  if (file.ok()) {
    // Every accepted tensor must lie inside the data section.
    for (const auto& t : file->tensors) {
      if (t.end < t.begin || file->data_offset + t.end > size) __builtin_trap();
    }
  }
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto header = deepinfer::io::ParseSafetensorsHeaderJson(text, size, "fuzz.json");
  if (header.ok()) {
    for (const auto& t : header->tensors) {
      if (t.end < t.begin || t.end > size) __builtin_trap();
    }
  }
  return 0;
}
