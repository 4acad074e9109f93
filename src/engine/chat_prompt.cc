#include "engine/chat_prompt.h"

#include "recipe/convert.h"
#include "recipe/render.h"

namespace deepinfer::engine {

base::StatusOr<std::vector<TokenId>> EncodeChatMessages(const tokenizer::Tokenizer& tokenizer,
                                                        const nlohmann::ordered_json& messages) {
  const nlohmann::ordered_json body = {{"model", "deepinfer"}, {"messages", messages}};
  DI_ASSIGN_OR_RETURN(recipe::ConvertedRequest converted,
                      recipe::ConvertChatCompletions(body, recipe::ConvertOptions{}));
  return tokenizer.Encode(recipe::RenderPrompt(converted.conversation).prompt);
}

}  // namespace deepinfer::engine
