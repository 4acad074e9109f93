#include "recipe/state_machine.h"

#include <algorithm>

#include "base/check.h"

namespace deepinfer::recipe {
namespace {

constexpr std::string_view kDsmlBegin = "<｜DSML｜";
constexpr std::string_view kDsmlEnd = "</｜DSML｜";
constexpr std::string_view kReasoningEnd = "</think>";

enum class StageKind : uint8_t {
  kCommon,
  kJson,
  kMatchedJson,
  kToolCalls,
  kToolName,
  kToolCallArguments,
  kParamName,
  kParamType,
  kParamValue,
  kReasoning,
  kFinished,
};

struct Stage {
  StageKind kind = StageKind::kCommon;
  bool flag = false;  // is_leading (common, reasoning, arguments) or string (param value)
};

// A literal marker with its KMP failure table.
struct Pattern {
  std::string text;
  std::vector<uint32_t> failure;

  explicit Pattern(std::string_view value) : text(value), failure(value.size(), 0) {
    uint32_t length = 0;
    for (size_t i = 1; i < text.size();) {
      if (text[i] == text[length]) {
        failure[i++] = ++length;
      } else if (length != 0) {
        length = failure[length - 1];
      } else {
        failure[i++] = 0;
      }
    }
  }

  uint32_t Next(uint32_t length, char byte) const {
    while (length > 0 && (length >= text.size() || text[length] != byte)) {
      length = failure[length - 1];
    }
    if (length < text.size() && text[length] == byte) ++length;
    return length;
  }
};

enum class MatchKind : uint8_t { kString, kNewlinesAndString, kLeadingNewline };

struct Branch {
  MatchKind kind = MatchKind::kString;
  const Pattern* pattern = nullptr;
  uint32_t length = 0;
  uint32_t newlines = 0;
  bool leading = true;
  bool matched = false;
  Stage next;
  OutputAction action;

  // Feeds one byte; true when the marker just completed.
  bool Feed(char byte) {
    switch (kind) {
      case MatchKind::kString:
        length = pattern->Next(length, byte);
        return length == pattern->text.size();
      case MatchKind::kNewlinesAndString: {
        if (length == 0 && byte == '\n') {
          ++newlines;
        } else {
          const uint32_t next_length = pattern->Next(length, byte);
          if (next_length <= length) newlines = 0;
          length = next_length;
        }
        return length == pattern->text.size();
      }
      case MatchKind::kLeadingNewline:
        if (leading) matched = byte == '\n';
        leading = false;
        return matched;
    }
    return false;
  }

  size_t MatchingLength() const {
    switch (kind) {
      case MatchKind::kString:
        return length;
      case MatchKind::kNewlinesAndString:
        return length + newlines;
      case MatchKind::kLeadingNewline:
        return matched ? 1 : 0;
    }
    return 0;
  }

  // No partial match in progress and no pending first-byte rule.
  bool Idle() const {
    switch (kind) {
      case MatchKind::kString:
        return length == 0;
      case MatchKind::kNewlinesAndString:
        return length == 0 && newlines == 0;
      case MatchKind::kLeadingNewline:
        return !leading;
    }
    return false;
  }
};

OutputAction Action(ActionKind kind) {
  OutputAction action;
  action.kind = kind;
  return action;
}

OutputAction Label(ActionKind kind, std::string_view label, uint32_t id = 0) {
  OutputAction action;
  action.kind = kind;
  action.label = label;
  action.id = id;
  return action;
}

}  // namespace

struct StateMachine::Impl {
  ParsingOptions options;
  // Fixed markers.
  Pattern json_fence{"```json\n"};
  Pattern plain_fence{"```\n"};
  Pattern open_brace{"{"};
  Pattern open_bracket{"["};
  Pattern json_end{"\n```"};
  Pattern dsml_begin{kDsmlBegin};
  Pattern dsml_end{kDsmlEnd};
  Pattern reasoning_end{kReasoningEnd};
  Pattern invoke_name{"invoke name=\""};
  Pattern v4_calls_end{"</｜DSML｜tool_calls>"};
  Pattern v41_calls_end{"</｜DSML｜ calls>"};
  Pattern quote{"\""};
  Pattern parameter_name{"parameter name=\""};
  Pattern string_true{"true\">"};
  Pattern string_false{"false\">"};
  std::vector<Pattern> stop_sequences;

  Stage stage;
  std::vector<Branch> branches;
  OutputAction on_unmatched;
  size_t stashed = 0;
  std::array<bool, 256> interesting{};  // bytes that can advance an idle branch

  explicit Impl(const ParsingOptions& parsing) : options(parsing) {
    for (const std::string& stop : options.stop_sequences) {
      if (!stop.empty()) stop_sequences.emplace_back(stop);
    }
    branches.reserve(8 + stop_sequences.size());
    Stage first;
    if (options.tool_call_initial_stage) {
      first = {StageKind::kToolCalls, false};
    } else if (options.reasoning_initial_stage) {
      switch (*options.reasoning_initial_stage) {
        case ReasoningStage::kStart:
          first = {StageKind::kReasoning, true};
          break;
        case ReasoningStage::kReasoning:
          first = {StageKind::kReasoning, false};
          break;
        case ReasoningStage::kContent:
          first = {StageKind::kCommon, false};
          break;
      }
    } else {
      first = {StageKind::kCommon, true};
    }
    Enter(first);
  }

  void Add(MatchKind kind, const Pattern* pattern, Stage next, OutputAction action) {
    Branch branch;
    branch.kind = kind;
    branch.pattern = pattern;
    branch.next = next;
    branch.action = action;
    branches.push_back(branch);
  }
  void AddString(const Pattern& pattern, Stage next, OutputAction action) {
    Add(MatchKind::kString, &pattern, next, action);
  }
  void AddStopSequences() {
    for (const Pattern& stop : stop_sequences) {
      AddString(stop, {StageKind::kFinished}, Action(ActionKind::kStopSequence));
    }
  }
  void AddToolCallBegin() {
    Add(MatchKind::kNewlinesAndString, &dsml_begin, {StageKind::kToolCalls},
        Action(ActionKind::kSkip));
  }

  // Replaces the current stage with `next` (fresh matchers, nothing stashed).
  void Enter(Stage next) {
    stage = next;
    branches.clear();
    stashed = 0;
    switch (next.kind) {
      case StageKind::kCommon:
        if (options.parse_json_output) {
          AddString(json_fence, {StageKind::kJson}, Action(ActionKind::kSkip));
          AddString(plain_fence, {StageKind::kJson}, Action(ActionKind::kSkip));
          AddString(open_brace, {StageKind::kJson}, Label(ActionKind::kLabel, "{"));
          AddString(open_bracket, {StageKind::kJson}, Label(ActionKind::kLabel, "["));
        } else {
          AddStopSequences();
        }
        if (options.parse_tool_calls) AddToolCallBegin();
        if (next.flag) {
          Add(MatchKind::kLeadingNewline, nullptr, {StageKind::kCommon, true},
              Action(ActionKind::kSkip));
        }
        AddString(reasoning_end, {StageKind::kCommon, false}, Action(ActionKind::kSkipInvalid));
        on_unmatched = Action(options.parse_json_output ? ActionKind::kToSpace : ActionKind::kRaw);
        break;
      case StageKind::kJson:
        AddStopSequences();
        AddString(json_end, {StageKind::kMatchedJson}, Action(ActionKind::kSkip));
        on_unmatched = Action(ActionKind::kRaw);
        break;
      case StageKind::kMatchedJson:
        if (options.parse_tool_calls) AddToolCallBegin();
        on_unmatched = Action(ActionKind::kToSpace);
        break;
      case StageKind::kToolCalls:
        AddString(invoke_name, {StageKind::kToolName}, Action(ActionKind::kToolCallBegin));
        AddString(v4_calls_end, {StageKind::kFinished}, Action(ActionKind::kSkip));
        AddString(v41_calls_end, {StageKind::kFinished}, Action(ActionKind::kSkip));
        on_unmatched = Action(ActionKind::kSkip);
        break;
      case StageKind::kToolName:
        AddString(quote, {StageKind::kToolCallArguments, true}, Action(ActionKind::kToolNameEnd));
        on_unmatched = Action(ActionKind::kToolName);
        break;
      case StageKind::kToolCallArguments:
        AddString(parameter_name, {StageKind::kParamName},
                  next.flag ? Label(ActionKind::kLabelToolCallArguments, "{\"", 0)
                            : Label(ActionKind::kLabelToolCallArguments, ", \"", 1));
        AddString(dsml_end, {StageKind::kToolCalls},
                  Label(ActionKind::kToolCallArgumentsEnd, next.flag ? "{}" : "}"));
        on_unmatched = Action(ActionKind::kSkip);
        break;
      case StageKind::kParamName:
        AddString(quote, {StageKind::kParamType},
                  Label(ActionKind::kLabelToolCallArguments, "\": ", 2));
        on_unmatched = Action(ActionKind::kRawToolCallArguments);
        break;
      case StageKind::kParamType:
        AddString(string_true, {StageKind::kParamValue, true},
                  Label(ActionKind::kLabelToolCallArguments, "\"", 3));
        AddString(string_false, {StageKind::kParamValue, false}, Action(ActionKind::kSkip));
        on_unmatched = Action(ActionKind::kSkip);
        break;
      case StageKind::kParamValue:
        AddString(dsml_end, {StageKind::kToolCallArguments, false},
                  next.flag ? Label(ActionKind::kLabelToolCallArguments, "\"", 4)
                            : Action(ActionKind::kSkip));
        on_unmatched = Action(ActionKind::kRawToolCallArguments);
        on_unmatched.string = next.flag;
        break;
      case StageKind::kReasoning:
        if (options.parse_tool_calls) AddToolCallBegin();
        if (next.flag) {
          Add(MatchKind::kLeadingNewline, nullptr, {StageKind::kReasoning, true},
              Action(ActionKind::kSkip));
        }
        Add(MatchKind::kNewlinesAndString, &reasoning_end, {StageKind::kCommon, true},
            Action(ActionKind::kSkip));
        on_unmatched = Action(ActionKind::kReasoning);
        break;
      case StageKind::kFinished:
        on_unmatched = Action(ActionKind::kSkipInvalid);
        break;
    }
    interesting.fill(false);
    for (const Branch& branch : branches) {
      if (branch.kind == MatchKind::kLeadingNewline) {
        interesting['\n'] = true;
      } else {
        interesting[static_cast<unsigned char>(branch.pattern->text[0])] = true;
        if (branch.kind == MatchKind::kNewlinesAndString) interesting['\n'] = true;
      }
    }
  }

  bool AllIdle() const {
    for (const Branch& branch : branches) {
      if (!branch.Idle()) return false;
    }
    return true;
  }

  void Emit(OutputAction action, size_t length, std::vector<ActionSegment>* out) {
    if (length == 0) return;
    if (!out->empty() && out->back().action == action) {
      out->back().length += length;  // coalesce (the processor would merge them anyway)
    } else {
      out->push_back({action, length});
    }
  }

  void Feed(std::string_view content, std::vector<ActionSegment>* out) {
    const size_t size = content.size();
    const char* data = content.data();
    size_t i = 0;
    bool idle = AllIdle();
    while (i < size) {
      if (idle) {
        // Skip bytes that cannot start any marker of this stage.
        const size_t start = i;
        while (i < size && !interesting[static_cast<unsigned char>(data[i])]) ++i;
        stashed += i - start;
        if (i >= size) break;
      }
      const char byte = data[i++];
      ++stashed;
      Branch* completed = nullptr;
      for (Branch& branch : branches) {
        if (branch.Feed(byte)) {
          completed = &branch;
          break;
        }
      }
      if (completed == nullptr) {
        idle = AllIdle();
        continue;
      }
      const size_t matching = completed->MatchingLength();
      const Stage next = completed->next;
      const OutputAction action = completed->action;
      if (matching < stashed) Emit(on_unmatched, stashed - matching, out);
      Emit(action, matching, out);
      Enter(next);
      idle = AllIdle();
    }
    size_t matching = 0;
    for (const Branch& branch : branches) matching = std::max(matching, branch.MatchingLength());
    if (matching < stashed) {
      Emit(on_unmatched, stashed - matching, out);
      stashed = matching;
    }
  }
};

StateMachine::StateMachine(const ParsingOptions& options)
    : impl_(std::make_unique<Impl>(options)) {}

StateMachine::~StateMachine() = default;

void StateMachine::Feed(std::string_view content, std::vector<ActionSegment>* out) {
  impl_->Feed(content, out);
}

void StateMachine::Finish(std::vector<ActionSegment>* out) {
  if (impl_->stashed > 0) impl_->Emit(impl_->on_unmatched, impl_->stashed, out);
  impl_->stashed = 0;
}

}  // namespace deepinfer::recipe
