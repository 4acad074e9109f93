// libFuzzer target: responses request bodies (see fuzz_request.h).
#include "recipe/fuzz/fuzz_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  deepinfer::recipe::FuzzRequest(deepinfer::recipe::Protocol::kResponses, data, size);
  return 0;
}
