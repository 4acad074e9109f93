#include "server/text_stream.h"

#include <algorithm>

#include "tokenizer/tokenizer.h"

namespace deepinfer::server {

TokenId EosTokenId(const tokenizer::Tokenizer& tokenizer) {
  return tokenizer.TokenToId("<｜end▁of▁sentence｜>").value_or(1);
}

TextStream::TextStream(const tokenizer::Tokenizer& tokenizer, std::vector<TokenId> stop_token_ids,
                       std::vector<std::string> stop_strings)
    : detokenizer_(std::make_unique<tokenizer::IncrementalDetokenizer>(tokenizer,
                                                                       /*skip_special=*/false)),
      stop_token_ids_(std::move(stop_token_ids)),
      stop_strings_(std::move(stop_strings)) {
  std::erase(stop_strings_, std::string());
}

TextStream::~TextStream() = default;

bool TextStream::Push(std::span<const TokenId> tokens) {
  for (const TokenId token : tokens) {
    if (stopped_) break;
    ++tokens_;
    if (std::find(stop_token_ids_.begin(), stop_token_ids_.end(), token) != stop_token_ids_.end()) {
      pending_ += detokenizer_->Flush();
      stopped_ = true;
      break;
    }
    auto piece = detokenizer_->Push(token);
    if (piece.ok()) pending_ += *piece;  // out-of-range ids cannot come from the model
    Settle();
  }
  if (stopped_ && stop_strings_.empty()) {
    ready_ += pending_;
    pending_.clear();
  }
  return stopped_;
}

void TextStream::Settle() {
  // Earliest complete stop string.
  size_t best = std::string::npos;
  for (const std::string& stop : stop_strings_) best = std::min(best, pending_.find(stop));
  if (best != std::string::npos) {
    ready_.append(pending_, 0, best);
    pending_.clear();
    stopped_ = true;
    return;
  }
  // Longest suffix of pending_ that is a proper prefix of some stop string stays pending.
  size_t hold = 0;
  for (const std::string& stop : stop_strings_) {
    for (size_t n = std::min(stop.size() - 1, pending_.size()); n > hold; --n) {
      if (pending_.compare(pending_.size() - n, n, stop, 0, n) == 0) {
        hold = n;
        break;
      }
    }
  }
  ready_.append(pending_, 0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
}

std::string TextStream::TakeReady() {
  std::string out;
  out.swap(ready_);
  return out;
}

std::string TextStream::Flush() {
  if (!stopped_) pending_ += detokenizer_->Flush();
  std::string out = TakeReady();
  if (!stopped_) out += pending_;
  pending_.clear();
  return out;
}

}  // namespace deepinfer::server
