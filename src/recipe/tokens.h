// Tokenizer glue (needs the tokenizer module): prompt text -> token ids, and the token-id
// decoder used by the output parser.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "recipe/output_parser.h"
#include "recipe/render.h"

namespace deepinfer::tokenizer {
class Tokenizer;
}

namespace deepinfer::recipe {

// Tokenizes a rendered prompt once, recognising special-token text (the prompt already holds
// BOS and the role tokens; nothing is added).
std::vector<int32_t> EncodePrompt(const tokenizer::Tokenizer& tokenizer, std::string_view prompt);

// A decoder over `tokenizer` (special tokens kept). `tokenizer` must outlive it.
std::unique_ptr<TokenDecoder> MakeTokenDecoder(const tokenizer::Tokenizer& tokenizer);

// Image token accounting (spec §2.9): an image of n_h x n_w patches (after the 14 px patch
// and 3x downsample) occupies n_h * (n_w + 1) + 2 positions, where the prompt holds one.
int64_t ImageInputTokens(int64_t grid_height, int64_t grid_width);
// Grid of a preprocessed image of `height` x `width` pixels: ceil(ceil(px / 14) / 3).
int64_t ImageGridSide(int64_t pixels);

// Tokenizer directory names ("deepseek-v4.1" / "deepseek-v4") for an encoding.
std::string_view TokenizerVersion(Encoding encoding);

}  // namespace deepinfer::recipe
