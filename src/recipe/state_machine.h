// Incremental byte-level parser of model output (spec §3.3, upstream deepseek-recipe
// state_machine.rs ac74541f semantics, re-implemented).
//
// Feed() takes output text in arbitrary pieces and returns action segments that cover the
// input bytes in order: each segment says what to do with the next `length` input bytes
// (emit as answer, emit as reasoning, skip, start a tool call, ...). Bytes that may be the
// start of a marker are held back until the marker completes or fails; Finish() releases
// them. The sum of all segment lengths equals the number of bytes fed.
//
// Fast path: while no marker is partially matched, bytes that cannot start any marker of the
// current stage are consumed by a table-driven scan (hundreds of MB/s).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "recipe/conversation.h"

namespace deepinfer::recipe {

enum class ActionKind : uint8_t {
  kRaw,                     // answer text
  kToSpace,                 // JSON mode: text around the JSON becomes one space
  kSkipInvalid,             // discarded (extra </think>, content after finish)
  kSkip,                    // discarded marker bytes
  kStopSequence,            // a matched stop sequence (discarded, ends the stream)
  kToolCallBegin,           // `invoke name="`
  kToolName,                // bytes of a tool name
  kToolNameEnd,             // the `"` after the name
  kLabelToolCallArguments,  // fixed arguments fragment (`{"`, `, "`, `": `, `"`)
  kRawToolCallArguments,    // argument bytes (JSON-escaped when `string`)
  kToolCallArgumentsEnd,    // `</｜DSML｜` closing an invoke: emits `{}` or `}`
  kReasoning,               // reasoning text
  kLabel,                   // fixed text emitted as answer (`{` / `[` in JSON mode)
};

struct OutputAction {
  ActionKind kind = ActionKind::kRaw;
  bool string = false;     // kRawToolCallArguments: value is a JSON string (escape it)
  uint32_t id = 0;         // kLabelToolCallArguments: which label
  std::string_view label;  // kLabel / kLabelToolCallArguments / kToolCallArgumentsEnd output

  friend bool operator==(const OutputAction& a, const OutputAction& b) {
    return a.kind == b.kind && a.string == b.string && a.id == b.id && a.label == b.label;
  }
};

struct ActionSegment {
  OutputAction action;
  size_t length = 0;
};

class StateMachine {
 public:
  explicit StateMachine(const ParsingOptions& options);
  ~StateMachine();
  StateMachine(const StateMachine&) = delete;
  StateMachine& operator=(const StateMachine&) = delete;

  // Appends the segments for `content` to `out`.
  void Feed(std::string_view content, std::vector<ActionSegment>* out);
  // Releases held-back bytes at the end of the output.
  void Finish(std::vector<ActionSegment>* out);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace deepinfer::recipe
