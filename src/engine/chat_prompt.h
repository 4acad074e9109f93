// Chat messages -> prompt token ids through the recipe (DeepSeek V4.1 chat format), for
// Engine users that submit conversations rather than token ids. Built when the recipe module
// is.
#pragma once

#include <nlohmann/json.hpp>
#include <vector>

#include "base/statusor.h"
#include "engine/types.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::engine {

// `messages`: an OpenAI Chat Completions "messages" array. The rendered prompt starts with
// BOS and ends with the assistant generation prefix (thinking mode as the recipe's default).
// InvalidArgument (the recipe's client-facing message) for malformed messages.
base::StatusOr<std::vector<TokenId>> EncodeChatMessages(const tokenizer::Tokenizer& tokenizer,
                                                        const nlohmann::ordered_json& messages);

}  // namespace deepinfer::engine
