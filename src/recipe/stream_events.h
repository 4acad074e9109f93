// Protocol event generators (spec §4): parsed OutputChunks -> Chat Completions chunks,
// Responses events, or Anthropic Messages events (JSON values, compact key order as on the
// wire), and accumulators that fold the same events into the non-streaming response.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "recipe/conversation.h"
#include "recipe/output_parser.h"

namespace deepinfer::recipe {

struct GeneratorOptions {
  std::string response_id;   // e.g. "chatcmpl-..."; tool call ids derive from it
  std::string model;         // public model name
  int64_t created = 0;       // Unix seconds for "created" / "created_at"
  int64_t completed_at = 0;  // Unix seconds for Responses "completed_at" (0 = `created`)
  bool thinking_mode = true;
  bool include_usage = true;                   // Chat: "usage": null on earlier chunks
  std::vector<std::string> custom_tool_names;  // Responses: custom tools (apply_patch)
  std::string signature;                       // Messages: thinking signature ("" = id)
};

class EventGenerator {
 public:
  virtual ~EventGenerator() = default;
  // Appends the events for one parsed chunk.
  virtual void Generate(const OutputChunk& chunk, std::vector<Json>* events) = 0;
};

class ResponseAccumulator {
 public:
  virtual ~ResponseAccumulator() = default;
  virtual void Append(const Json& event) = 0;
  // The non-streaming response built from the events so far.
  virtual Json Result() const = 0;
};

std::unique_ptr<EventGenerator> MakeEventGenerator(Protocol protocol,
                                                   const GeneratorOptions& options);
std::unique_ptr<ResponseAccumulator> MakeAccumulator(Protocol protocol,
                                                     const GeneratorOptions& options);

std::unique_ptr<EventGenerator> MakeChatGenerator(const GeneratorOptions& options);
std::unique_ptr<EventGenerator> MakeResponsesGenerator(const GeneratorOptions& options);
std::unique_ptr<EventGenerator> MakeMessagesGenerator(const GeneratorOptions& options);
std::unique_ptr<ResponseAccumulator> MakeChatAccumulator(const GeneratorOptions& options);
std::unique_ptr<ResponseAccumulator> MakeResponsesAccumulator(const GeneratorOptions& options);
std::unique_ptr<ResponseAccumulator> MakeMessagesAccumulator(const GeneratorOptions& options);

// Server-sent-event framing of one event: Chat "data: <json>\n\n"; Responses and Messages
// "event: <type>\ndata: <json>\n\n".
std::string SseFrame(Protocol protocol, const Json& event);
// The stream terminator: "data: [DONE]\n\n" for Chat, "" otherwise.
std::string SseDone(Protocol protocol);

}  // namespace deepinfer::recipe
