#include "recipe/tokens.h"

#include "tokenizer/tokenizer.h"

namespace deepinfer::recipe {
namespace {

class DetokenizerDecoder : public TokenDecoder {
 public:
  explicit DetokenizerDecoder(const tokenizer::Tokenizer& tokenizer)
      : detokenizer_(tokenizer, /*skip_special_tokens=*/false) {}
  base::StatusOr<std::string> Push(int32_t id) override { return detokenizer_.Push(id); }

 private:
  tokenizer::IncrementalDetokenizer detokenizer_;
};

}  // namespace

std::vector<int32_t> EncodePrompt(const tokenizer::Tokenizer& tokenizer, std::string_view prompt) {
  return tokenizer.Encode(prompt, /*match_special_tokens=*/true);
}

std::unique_ptr<TokenDecoder> MakeTokenDecoder(const tokenizer::Tokenizer& tokenizer) {
  return std::make_unique<DetokenizerDecoder>(tokenizer);
}

int64_t ImageInputTokens(int64_t grid_height, int64_t grid_width) {
  return grid_height * (grid_width + 1) + 2;
}

int64_t ImageGridSide(int64_t pixels) {
  const int64_t patches = (pixels + 13) / 14;
  return (patches + 2) / 3;
}

std::string_view TokenizerVersion(Encoding encoding) {
  return encoding == Encoding::kV4 ? "deepseek-v4" : "deepseek-v4.1";
}

}  // namespace deepinfer::recipe
