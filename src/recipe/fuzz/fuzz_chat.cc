// libFuzzer target: chat request bodies (see fuzz_request.h).
#include "recipe/fuzz/fuzz_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  deepinfer::recipe::FuzzRequest(deepinfer::recipe::Protocol::kChatCompletions, data, size);
  return 0;
}
