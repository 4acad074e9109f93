#include "tokenizer/tokenizer.h"

#include <fstream>
#include <sstream>

#include "base/thread_pool.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"

namespace deepinfer::tokenizer {
namespace {

// Scratch buffers reused across calls on one thread (no allocation per call in steady state).
struct EncodeScratch {
  std::string sanitized;
  std::vector<TextSegment> segments;
  std::vector<std::string_view> pieces;
};

EncodeScratch& ThreadScratch() {
  thread_local EncodeScratch scratch;
  return scratch;
}

base::Status CheckId(const TokenizerImpl& impl, int32_t id) {
  if (id < 0 || static_cast<size_t>(id) >= impl.tokens.size()) {
    return base::OutOfRangeError("token id " + std::to_string(id) + " outside [0, " +
                                 std::to_string(impl.tokens.size()) + ")");
  }
  if (!impl.tokens[id].exists) {
    return base::NotFoundError("token id " + std::to_string(id) + " is not assigned");
  }
  return base::Status::Ok();
}

}  // namespace

void TokenizerImpl::EncodePlain(std::string_view text, std::vector<int32_t>* ids) const {
  std::vector<std::string_view>& pieces = ThreadScratch().pieces;
  pieces.clear();
  pre_tokenizer->Split(text, &pieces);
  for (std::string_view piece : pieces) bpe->EncodeWord(piece, ids);
}

Tokenizer::Tokenizer(std::unique_ptr<TokenizerImpl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

base::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromFile(
    const std::string& tokenizer_json_path) {
  std::ifstream in(tokenizer_json_path, std::ios::binary);
  if (!in) return base::NotFoundError("cannot open tokenizer file " + tokenizer_json_path);
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return base::DataLossError("cannot read tokenizer file " + tokenizer_json_path);
  return FromJson(buffer.str(), tokenizer_json_path);
}

base::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(std::string_view json_text,
                                                               std::string_view source_name) {
  DI_ASSIGN_OR_RETURN(std::unique_ptr<TokenizerImpl> impl,
                      LoadTokenizerImpl(json_text, source_name));
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(impl)));
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool match_special_tokens) const {
  EncodeScratch& scratch = ThreadScratch();
  const std::string_view valid = SanitizeUtf8(text, &scratch.sanitized);
  std::vector<int32_t> ids;
  ids.reserve(valid.size() / 3 + 4);
  if (!match_special_tokens) {
    impl_->EncodePlain(valid, &ids);
    return ids;
  }
  // `segments` point into `valid`, which may live in scratch.sanitized: neither is touched
  // again until this call returns (EncodePlain only uses scratch.pieces).
  std::vector<TextSegment> segments;
  segments.swap(scratch.segments);
  segments.clear();
  impl_->added_matcher.Split(valid, &segments);
  for (const TextSegment& segment : segments) {
    if (segment.added_id >= 0) {
      ids.push_back(segment.added_id);
    } else {
      impl_->EncodePlain(segment.text, &ids);
    }
  }
  segments.swap(scratch.segments);
  return ids;
}

std::vector<std::vector<int32_t>> Tokenizer::EncodeBatch(std::span<const std::string> texts,
                                                         bool match_special_tokens,
                                                         base::ThreadPool* pool) const {
  std::vector<std::vector<int32_t>> results(texts.size());
  base::ThreadPool& workers = pool ? *pool : base::ThreadPool::Default();
  workers.ParallelFor(static_cast<int64_t>(texts.size()), 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) results[i] = Encode(texts[i], match_special_tokens);
  });
  return results;
}

base::StatusOr<std::string> Tokenizer::Decode(std::span<const int32_t> ids,
                                              bool skip_special_tokens) const {
  std::string bytes;
  bytes.reserve(ids.size() * 4);
  for (int32_t id : ids) {
    DI_RETURN_IF_ERROR(CheckId(*impl_, id));
    const TokenInfo& token = impl_->tokens[id];
    if (skip_special_tokens && token.special) continue;
    bytes += token.bytes;
  }
  std::string text;
  const std::string_view valid = SanitizeUtf8(bytes, &text);
  if (valid.data() == bytes.data()) return bytes;
  return text;
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->tokens.size()); }

std::optional<int32_t> Tokenizer::TokenToId(std::string_view token) const {
  const std::string key(token);
  if (auto it = impl_->added_ids.find(key); it != impl_->added_ids.end()) return it->second;
  if (auto it = impl_->vocab_ids.find(key); it != impl_->vocab_ids.end()) return it->second;
  return std::nullopt;
}

base::StatusOr<std::string> Tokenizer::IdToToken(int32_t id) const {
  DI_RETURN_IF_ERROR(CheckId(*impl_, id));
  return impl_->tokens[id].spelled;
}

bool Tokenizer::IsSpecial(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < impl_->tokens.size() && impl_->tokens[id].special;
}

bool Tokenizer::IsAdded(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < impl_->tokens.size() && impl_->tokens[id].added;
}

base::StatusOr<std::string> Tokenizer::TokenBytes(int32_t id) const {
  DI_RETURN_IF_ERROR(CheckId(*impl_, id));
  return impl_->tokens[id].bytes;
}

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tok, bool skip_special_tokens)
    : tok_(&tok), skip_special_tokens_(skip_special_tokens) {}

base::StatusOr<std::string> IncrementalDetokenizer::Push(int32_t id) {
  DI_ASSIGN_OR_RETURN(const std::string bytes, tok_->TokenBytes(id));
  if (skip_special_tokens_ && tok_->IsSpecial(id)) return std::string();
  pending_ += bytes;
  std::string out;
  size_t pos = 0;
  while (pos < pending_.size()) {
    const Utf8Step step = NextUtf8Step(std::string_view(pending_).substr(pos));
    if (step.kind == Utf8Step::kTruncated) break;  // wait for the rest of the sequence
    if (step.kind == Utf8Step::kValid) {
      out.append(pending_, pos, step.length);
    } else {
      out.append(kReplacementChar);
    }
    pos += step.length;
  }
  pending_.erase(0, pos);
  return out;
}

std::string IncrementalDetokenizer::Flush() {
  std::string out;
  AppendUtf8Lossy(pending_, &out);
  pending_.clear();
  return out;
}

}  // namespace deepinfer::tokenizer
