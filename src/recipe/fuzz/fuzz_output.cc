// libFuzzer target: the output state machine and the three protocol generators. Byte 0
// selects parsing options, byte 1 the piece size; the rest is model output.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "recipe/stream_processor.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace deepinfer::recipe;
  if (size < 2) return 0;
  const uint8_t flags = data[0];
  const size_t piece = 1 + data[1] % 16;
  const std::string_view output(reinterpret_cast<const char*>(data + 2), size - 2);
  for (Protocol protocol :
       {Protocol::kChatCompletions, Protocol::kResponses, Protocol::kMessages}) {
    ConvertedRequest request;
    request.protocol = protocol;
    request.conversation.thinking_mode = flags & 1;
    request.parsing_options.parse_tool_calls = flags & 2;
    request.parsing_options.parse_json_output = flags & 4;
    request.parsing_options.tool_call_initial_stage = flags & 8;
    if (flags & 1) request.parsing_options.reasoning_initial_stage = ReasoningStage::kStart;
    if (flags & 16) request.parsing_options.stop_sequences = {"STOP", "\n\n", ""};
    if (flags & 32) request.custom_tool_names = {"apply_patch"};
    StreamProcessorOptions options;
    options.response_id = "fuzz";
    options.model = "m";
    options.accumulate = true;
    StreamProcessor processor(request, std::move(options));
    processor.OnReady(std::nullopt, {3, 1});
    for (size_t at = 0; at < output.size(); at += piece) {
      processor.OnText(output.substr(at, piece), 1);
      for (const Json& event : processor.TakeEvents()) (void)SseFrame(protocol, event);
    }
    if (flags & 64) {
      processor.OnEnd();
    } else {
      processor.OnFinish(flags & 128 ? BackendFinish::kLength : BackendFinish::kStop);
    }
    (void)WriteJson(processor.FinalResponse());
  }
  return 0;
}
