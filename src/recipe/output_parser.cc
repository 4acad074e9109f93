#include "recipe/output_parser.h"

#include "recipe/json_writer.h"

namespace deepinfer::recipe {
namespace {

constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";

OutputChunk Chunk(OutputChunk::Kind kind, std::string text = {}) {
  OutputChunk chunk;
  chunk.kind = kind;
  chunk.text = std::move(text);
  return chunk;
}

// Length of the longest prefix of `text` that does not end inside a UTF-8 sequence (an
// incomplete trailing sequence is held back until the next piece completes it).
size_t CompleteUtf8Prefix(std::string_view text) {
  const size_t size = text.size();
  for (size_t back = 1; back <= 4 && back <= size; ++back) {
    const unsigned char c = static_cast<unsigned char>(text[size - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    size_t need = 1;
    if ((c & 0xE0) == 0xC0) need = 2;
    if ((c & 0xF0) == 0xE0) need = 3;
    if ((c & 0xF8) == 0xF0) need = 4;
    return back < need ? size - back : size;
  }
  return size;
}

}  // namespace

OutputParser::OutputParser(const ParsingOptions& options, std::unique_ptr<TokenDecoder> decoder)
    : options_(options), machine_(options), decoder_(std::move(decoder)) {}

OutputParser::~OutputParser() = default;

void OutputParser::EnsureStarted(std::vector<OutputChunk>* out) {
  if (started_) return;
  started_ = true;
  OutputChunk start = Chunk(OutputChunk::Kind::kStart);
  start.prompt_usage = prompt_usage_;
  out->push_back(std::move(start));
}

void OutputParser::Ready(std::optional<std::string> system_fingerprint, PromptUsage usage,
                         std::vector<OutputChunk>* out) {
  if (done_) return;
  prompt_usage_ = usage;
  if (started_) return;
  started_ = true;
  OutputChunk start = Chunk(OutputChunk::Kind::kStart);
  start.system_fingerprint = std::move(system_fingerprint);
  start.prompt_usage = usage;
  out->push_back(std::move(start));
}

void OutputParser::Text(std::string_view content, int64_t tokens, std::vector<OutputChunk>* out) {
  if (done_) return;
  Consume(content, tokens, out);
}

base::Status OutputParser::Token(int32_t id, std::vector<OutputChunk>* out) {
  if (done_) return base::Status::Ok();
  if (decoder_ == nullptr) {
    done_ = true;
    return base::FailedPreconditionError("token chunk received without a tokenizer");
  }
  base::StatusOr<std::string> text = decoder_->Push(id);
  if (!text.ok()) {
    done_ = true;
    return text.status();
  }
  token_text_ += *text;
  ++token_count_;
  const bool incomplete =
      token_text_.empty() || std::string_view(token_text_).ends_with(kReplacementChar);
  if (incomplete) return base::Status::Ok();
  std::string ready = std::move(token_text_);
  token_text_.clear();
  const int64_t count = token_count_;
  token_count_ = 0;
  Consume(ready, count, out);
  return base::Status::Ok();
}

void OutputParser::Finish(BackendFinish reason, std::vector<OutputChunk>* out) {
  if (done_) return;
  backend_finish_ = reason;
  Tail(out);
}

void OutputParser::End(std::vector<OutputChunk>* out) {
  if (done_) return;
  Tail(out);
}

void OutputParser::Consume(std::string_view content, int64_t tokens,
                           std::vector<OutputChunk>* out) {
  EnsureStarted(out);
  // Pieces may split a UTF-8 character (byte-level token boundaries, client-chosen chunks);
  // parse only whole characters so that no emitted text carries half of one.
  std::string joined;
  if (!utf8_carry_.empty()) {
    joined = std::move(utf8_carry_);
    joined.append(content);
    content = joined;
  }
  const size_t complete = CompleteUtf8Prefix(content);
  utf8_carry_.assign(content.substr(complete));
  content = content.substr(0, complete);
  completion_tokens_ += tokens;
  segments_.clear();
  machine_.Feed(content, &segments_);
  chunks_.emplace_back(content);  // empty pieces too: in JSON mode they still map to " "
  ApplySegments(out);
  if (stop_matched_) {
    stop_sequence_ = std::move(stop_text_);
    stop_text_.clear();
    stop_matched_ = false;
    Tail(out);
  }
}

void OutputParser::Tail(std::vector<OutputChunk>* out) {
  done_ = true;
  EnsureStarted(out);
  segments_.clear();
  if (!stop_sequence_ && !utf8_carry_.empty()) {
    // An incomplete character at the very end: emit its bytes (rendered as U+FFFD).
    machine_.Feed(utf8_carry_, &segments_);
    chunks_.push_back(std::move(utf8_carry_));
  }
  utf8_carry_.clear();
  machine_.Finish(&segments_);
  ApplySegments(out);
  if (stop_matched_) {
    // A stop sequence matched across the end of the input.
    if (!stop_sequence_) stop_sequence_.emplace();
    *stop_sequence_ += stop_text_;
    stop_matched_ = false;
  }
  OutputChunk finish = Chunk(OutputChunk::Kind::kFinish);
  if (stop_sequence_) {
    finish.finish_reason = FinishReason::kStopSequence;
  } else if (!backend_finish_) {
    finish.finish_reason = FinishReason::kEndOfStream;
  } else if (*backend_finish_ == BackendFinish::kStop) {
    finish.finish_reason = has_tool_calls_ ? FinishReason::kToolCalls : FinishReason::kStop;
  } else if (*backend_finish_ == BackendFinish::kLength) {
    finish.finish_reason = FinishReason::kLength;
  } else {
    finish.finish_reason = FinishReason::kContentFilter;
  }
  finish.stop_sequence = stop_sequence_;
  finish.completion_tokens = completion_tokens_;
  out->push_back(std::move(finish));
}

// Coalesces consecutive segments with the same action and applies them to the queued text:
// whole queued pieces are emitted eagerly; a partially covered piece waits for more input.
void OutputParser::ApplySegments(std::vector<OutputChunk>* out) {
  for (const ActionSegment& segment : segments_) {
    if (!pending_segment_) {
      pending_segment_ = segment;
      continue;
    }
    if (segment.action == pending_segment_->action) {
      pending_segment_->length += segment.length;
      continue;
    }
    ApplyWholeChunks(&*pending_segment_, out);
    if (pending_segment_->length > 0) Pop(*pending_segment_, out);
    pending_segment_ = segment;
  }
  if (pending_segment_) ApplyWholeChunks(&*pending_segment_, out);
}

void OutputParser::ApplyWholeChunks(ActionSegment* segment, std::vector<OutputChunk>* out) {
  while (!chunks_.empty()) {
    const size_t front_length = chunks_.front().size() - front_offset_;
    if (front_length > segment->length) return;
    Pop({segment->action, front_length}, out);
    segment->length -= front_length;
  }
}

// Removes `segment.length` bytes from the queue front and maps them to an output chunk.
void OutputParser::Pop(const ActionSegment& segment, std::vector<OutputChunk>* out) {
  if (chunks_.empty()) return;
  std::string& front = chunks_.front();
  const size_t available = front.size() - front_offset_;
  const size_t take = std::min(segment.length, available);
  const std::string_view piece(front.data() + front_offset_, take);
  const OutputAction previous = last_pop_;
  last_pop_ = segment.action;
  const OutputAction& action = segment.action;
  switch (action.kind) {
    case ActionKind::kRaw:
      if (!piece.empty()) out->push_back(Chunk(OutputChunk::Kind::kRaw, std::string(piece)));
      break;
    case ActionKind::kReasoning:
      if (!piece.empty()) out->push_back(Chunk(OutputChunk::Kind::kReasoning, std::string(piece)));
      break;
    case ActionKind::kToSpace:
      out->push_back(Chunk(OutputChunk::Kind::kRaw, " "));
      break;
    case ActionKind::kSkip:
    case ActionKind::kSkipInvalid:
      break;
    case ActionKind::kStopSequence:
      stop_text_.append(piece);
      stop_matched_ = true;
      break;
    case ActionKind::kToolCallBegin:
      if (previous.kind != ActionKind::kToolCallBegin) {
        out->push_back(Chunk(OutputChunk::Kind::kToolCallBegin));
      }
      break;
    case ActionKind::kToolName:
      tool_name_.append(piece);
      break;
    case ActionKind::kToolNameEnd:
      if (previous.kind != ActionKind::kToolNameEnd) {
        has_tool_calls_ = true;
        out->push_back(Chunk(OutputChunk::Kind::kToolCall, std::move(tool_name_)));
        tool_name_.clear();
      }
      break;
    case ActionKind::kLabelToolCallArguments:
    case ActionKind::kToolCallArgumentsEnd:
      if (!(previous == action) && !action.label.empty()) {
        out->push_back(Chunk(OutputChunk::Kind::kArgumentsDelta, std::string(action.label)));
      }
      break;
    case ActionKind::kRawToolCallArguments: {
      std::string text;
      if (action.string) {
        AppendEscapedJsonText(&text, piece);
      } else {
        text.assign(piece);
      }
      out->push_back(Chunk(OutputChunk::Kind::kArgumentsDelta, std::move(text)));
      break;
    }
    case ActionKind::kLabel:
      if (!(previous == action)) {
        out->push_back(Chunk(OutputChunk::Kind::kRaw, std::string(action.label)));
      }
      break;
  }
  if (take == available) {
    chunks_.pop_front();
    front_offset_ = 0;
  } else {
    front_offset_ += take;
  }
}

}  // namespace deepinfer::recipe
