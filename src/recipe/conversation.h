// The protocol-independent request model every API request converts into (spec §2.2, §3.2),
// plus the sampling parameters handed to the engine.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "recipe/json_writer.h"

namespace deepinfer::recipe {

enum class Protocol { kChatCompletions, kResponses, kMessages };

enum class ImageDetail { kLow, kHigh, kOriginal, kAuto };

// Where an image comes from. `data` holds the URL, the data URL, or the raw bytes.
struct ImageSource {
  enum class Kind { kUrl, kDataUrl, kBytes };
  Kind kind = Kind::kUrl;
  std::string data;
  ImageDetail detail = ImageDetail::kHigh;
};

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text as sent by the client (not re-validated)
};

enum class Role { kSystem, kUser, kAssistant, kTool, kLatestReminder };

// One conversation turn. Fields not used by a role stay empty.
struct Message {
  Role role = Role::kUser;
  std::string content;
  std::vector<ImageSource> images;                  // user, tool
  std::string reasoning_content;                    // assistant ("" = none)
  std::optional<std::vector<ToolCall>> tool_calls;  // assistant (nullopt = none)
  std::string tool_call_id;                         // tool

  static Message System(std::string content);
  static Message User(std::string content, std::vector<ImageSource> images = {});
  static Message Assistant(std::string content, std::string reasoning,
                           std::optional<std::vector<ToolCall>> tool_calls);
  static Message Tool(std::string content, std::vector<ImageSource> images, std::string id);
  static Message LatestReminder(std::string content);
};

struct ToolDefinition {
  std::string name;
  std::optional<std::string> description;
  Json parameters = Json::object();  // JSON Schema, key order preserved
  std::optional<bool> strict;
};

enum class ToolChoice { kAuto, kNone, kRequired };
enum class ReasoningEffort { kLow, kHigh, kXhigh, kMax };
enum class ResponseFormat { kText, kJsonObject };

struct Conversation {
  std::vector<Message> messages;
  bool thinking_mode = true;
  std::vector<ToolDefinition> tools;
  ToolChoice tool_choice = ToolChoice::kAuto;
  std::optional<ReasoningEffort> reasoning_effort;
  ResponseFormat response_format = ResponseFormat::kText;
};

// What the recipe forwards to inference (spec "inference_options").
struct InferenceOptions {
  std::optional<uint32_t> max_tokens;
  std::optional<float> temperature;
  std::optional<float> top_p;
  std::optional<uint64_t> thinking_budget_tokens;
  std::optional<bool> disable_parallel_tool_use;
};

enum class ReasoningStage { kStart, kReasoning, kContent };

// Output parsing configuration (spec §3.2).
struct ParsingOptions {
  bool parse_tool_calls = true;
  bool tool_call_initial_stage = false;
  bool parse_json_output = false;
  std::optional<ReasoningStage> reasoning_initial_stage;
  std::vector<std::string> stop_sequences;
};

// Everything the engine needs to sample, beyond the recipe: values the recipe validates and
// drops (penalties, seed) and extensions it would reject (n > 1, logprobs, JSON schema).
// Enforcement is the engine's job.
struct SamplingParams {
  std::optional<uint32_t> max_tokens;
  std::optional<float> temperature;
  std::optional<float> top_p;
  std::optional<int32_t> top_k;
  std::optional<float> min_p;
  std::optional<float> frequency_penalty;
  std::optional<float> presence_penalty;
  std::optional<float> repetition_penalty;
  std::optional<uint64_t> seed;
  uint32_t n = 1;
  bool logprobs = false;
  std::optional<uint32_t> top_logprobs;
  std::vector<std::string> stop;  // also in ParsingOptions; the engine may stop early on them
  std::optional<uint64_t> thinking_budget_tokens;
  // "text", "json_object" or "json_schema"; for json_schema `json_schema` holds the client's
  // object ({"name", "schema", "strict"?...}) verbatim.
  std::string response_format_type = "text";
  Json json_schema;  // null unless response_format_type == "json_schema"
  Json user;         // the client's `user` / metadata.user_id, if any (null otherwise)
};

// A validated request, ready to render and to parse output for.
struct ConvertedRequest {
  Protocol protocol = Protocol::kChatCompletions;
  Conversation conversation;
  InferenceOptions inference_options;
  ParsingOptions parsing_options;
  SamplingParams sampling;
  std::string model;
  bool stream = false;
  // Chat Completions: whether chunks before the last carry "usage": null (true when not
  // streaming or stream_options.include_usage is set).
  bool include_usage = true;
  // Responses: declared custom tools (e.g. apply_patch) whose output is a custom_tool_call.
  std::vector<std::string> custom_tool_names;
};

const char* ImageDetailName(ImageDetail detail);
const char* ReasoningEffortName(ReasoningEffort effort);

// The reference dump of a conversion (conformance format, README "convert").
Json DumpConversion(const ConvertedRequest& request);
Json DumpImages(const std::vector<ImageSource>& images);

}  // namespace deepinfer::recipe
