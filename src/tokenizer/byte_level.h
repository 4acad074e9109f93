// GPT-2 style byte-level alphabet: each byte 0..255 is spelled as one printable Unicode
// character (printable Latin-1 bytes as themselves, the others as U+0100 + n). Vocab and
// merge strings in tokenizer.json use this spelling.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace deepinfer::tokenizer {

// Code point that spells `byte`.
char32_t ByteToCodePoint(uint8_t byte);

// Byte spelled by code point `cp`, or nullopt if `cp` is not in the alphabet.
std::optional<uint8_t> CodePointToByte(char32_t cp);

// Decodes a byte-level spelling ("Ġthe") to raw bytes (" the"). nullopt if some character is
// not in the alphabet (or `spelled` is not valid UTF-8).
std::optional<std::string> ByteLevelToBytes(std::string_view spelled);

// Inverse: raw bytes -> byte-level spelling (UTF-8).
std::string BytesToByteLevel(std::string_view bytes);

}  // namespace deepinfer::tokenizer
