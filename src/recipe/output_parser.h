// Backend output -> parsed output chunks (spec §3.1, §3.5): feeds the state machine, maps
// its segments back onto the received text pieces, tracks usage and resolves the finish
// reason. Protocol-independent; the generators (stream_events.h) turn OutputChunks into
// protocol events.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "base/statusor.h"
#include "recipe/conversation.h"
#include "recipe/state_machine.h"

namespace deepinfer::recipe {

struct PromptUsage {
  int64_t prompt_tokens = 0;
  int64_t prompt_cache_hit_tokens = 0;
};

// How the backend ended generation.
enum class BackendFinish { kStop, kLength, kContentFilter };

// The resolved finish reason (spec §3.5).
enum class FinishReason { kStop, kLength, kToolCalls, kContentFilter, kStopSequence, kEndOfStream };

struct OutputChunk {
  enum class Kind { kStart, kRaw, kReasoning, kToolCallBegin, kToolCall, kArgumentsDelta, kFinish };
  Kind kind = Kind::kRaw;
  std::string text;  // kRaw / kReasoning content, kToolCall name, kArgumentsDelta fragment
  // kStart
  std::optional<std::string> system_fingerprint;
  PromptUsage prompt_usage;
  // kFinish
  FinishReason finish_reason = FinishReason::kStop;
  std::optional<std::string> stop_sequence;
  int64_t completion_tokens = 0;
};

// Turns token ids into text for Token chunks (an IncrementalDetokenizer in production).
class TokenDecoder {
 public:
  virtual ~TokenDecoder() = default;
  // The newly completed text ("" while a UTF-8 sequence is incomplete).
  virtual base::StatusOr<std::string> Push(int32_t id) = 0;
};

class OutputParser {
 public:
  // `decoder` may be null (Token() then fails, as the reference does without a tokenizer).
  OutputParser(const ParsingOptions& options, std::unique_ptr<TokenDecoder> decoder);
  ~OutputParser();

  // Backend accepted the prompt. Only the first Ready before any output is visible.
  void Ready(std::optional<std::string> system_fingerprint, PromptUsage usage,
             std::vector<OutputChunk>* out);
  // A piece of generated text worth `tokens` completion tokens. After a stop sequence the
  // stream is finished and further input is ignored.
  void Text(std::string_view content, int64_t tokens, std::vector<OutputChunk>* out);
  // One generated token id; errors (no decoder, bad id) end the stream without a Finish.
  base::Status Token(int32_t id, std::vector<OutputChunk>* out);
  // Backend finished; emits the remaining output and the Finish chunk.
  void Finish(BackendFinish reason, std::vector<OutputChunk>* out);
  // The source ended without Finish (finish reason end_of_stream).
  void End(std::vector<OutputChunk>* out);

  bool done() const { return done_; }
  bool has_tool_calls() const { return has_tool_calls_; }

 private:
  void Consume(std::string_view content, int64_t tokens, std::vector<OutputChunk>* out);
  void Tail(std::vector<OutputChunk>* out);
  void EnsureStarted(std::vector<OutputChunk>* out);
  void ApplySegments(std::vector<OutputChunk>* out);
  void ApplyWholeChunks(ActionSegment* segment, std::vector<OutputChunk>* out);
  void Pop(const ActionSegment& segment, std::vector<OutputChunk>* out);

  ParsingOptions options_;
  StateMachine machine_;
  std::unique_ptr<TokenDecoder> decoder_;
  std::vector<ActionSegment> segments_;  // scratch

  // Received text not yet mapped to output; the front may be partially consumed.
  std::deque<std::string> chunks_;
  size_t front_offset_ = 0;
  std::optional<ActionSegment> pending_segment_;  // coalesced segment not fully applied

  OutputAction last_pop_{ActionKind::kSkip, false, 0, {}};
  std::string tool_name_;
  std::string stop_text_;
  bool stop_matched_ = false;
  bool has_tool_calls_ = false;

  std::string utf8_carry_;  // bytes of an incomplete trailing UTF-8 character
  std::string token_text_;  // decoded token text waiting for a complete character
  int64_t token_count_ = 0;

  bool started_ = false;
  bool done_ = false;
  PromptUsage prompt_usage_;
  int64_t completion_tokens_ = 0;
  std::optional<BackendFinish> backend_finish_;
  std::optional<std::string> stop_sequence_;
};

}  // namespace deepinfer::recipe
