// Per-request output processing for the server/engine: backend output (text pieces or token
// ids) -> protocol events (streaming) and the final protocol response (non-streaming).
//
//   StreamProcessor processor(request, {.response_id = id, .model = "deepseek-v4.1-flash"});
//   processor.OnReady(fingerprint, {prompt_tokens, cache_hit});
//   for each generated token: DI_RETURN_IF_ERROR(processor.OnToken(id));
//     for (const Json& event : processor.TakeEvents()) send(SseFrame(protocol, event));
//   processor.OnFinish(BackendFinish::kStop);   // or OnEnd() if the source just stopped
//   ... send the remaining events, then SseDone(protocol); or reply processor.FinalResponse().
//
// Not thread-safe: one processor per request, used from one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "recipe/conversation.h"
#include "recipe/output_parser.h"
#include "recipe/stream_events.h"

namespace deepinfer::recipe {

struct StreamProcessorOptions {
  std::string response_id;
  std::string model;
  int64_t created = 0;       // Unix seconds; 0 = now
  int64_t completed_at = 0;  // Responses "completed_at"; 0 = created
  // Keep every event for FinalResponse() (default: only for non-streaming requests).
  std::optional<bool> accumulate;
  // Needed for OnToken(); see MakeTokenDecoder() in recipe/tokens.h.
  std::unique_ptr<TokenDecoder> decoder;
};

// The generator settings a converted request implies.
GeneratorOptions GeneratorOptionsFor(const ConvertedRequest& request, std::string response_id,
                                     std::string model, int64_t created);

class StreamProcessor {
 public:
  StreamProcessor(const ConvertedRequest& request, StreamProcessorOptions options);
  ~StreamProcessor();

  void OnReady(std::optional<std::string> system_fingerprint, PromptUsage usage);
  void OnText(std::string_view text, int64_t tokens);
  // Fails (and ends the stream without a finish event) without a decoder or on a bad id.
  base::Status OnToken(int32_t token_id);
  void OnFinish(BackendFinish reason);
  void OnEnd();

  // Events produced since the previous call, in order.
  std::vector<Json> TakeEvents();
  // The non-streaming response (chat.completion / response / message) from all events.
  Json FinalResponse() const;
  bool done() const { return parser_.done(); }
  Protocol protocol() const { return protocol_; }

 private:
  void Dispatch();

  Protocol protocol_;
  OutputParser parser_;
  std::unique_ptr<EventGenerator> generator_;
  std::unique_ptr<ResponseAccumulator> accumulator_;
  std::vector<OutputChunk> chunks_;
  std::vector<Json> events_;
};

}  // namespace deepinfer::recipe
