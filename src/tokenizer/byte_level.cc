#include "tokenizer/byte_level.h"

#include "tokenizer/utf8.h"

namespace deepinfer::tokenizer {
namespace {

struct Tables {
  std::array<char32_t, 256> byte_to_cp{};
  std::array<int16_t, 512> cp_to_byte{};  // all alphabet code points are < 512; -1 = none
};

bool IsSelfSpelled(int b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

const Tables& GetTables() {
  static const Tables tables = [] {
    Tables t;
    t.cp_to_byte.fill(-1);
    int next_extra = 0;
    for (int b = 0; b < 256; ++b) {
      const char32_t cp = IsSelfSpelled(b) ? static_cast<char32_t>(b) : 256 + next_extra++;
      t.byte_to_cp[b] = cp;
      t.cp_to_byte[cp] = static_cast<int16_t>(b);
    }
    return t;
  }();
  return tables;
}

void AppendCodePoint(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else {  // the alphabet only needs two-byte sequences (cp < 0x800)
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// Decodes one valid UTF-8 sequence of `len` bytes.
char32_t DecodeCodePoint(std::string_view s, size_t len) {
  const auto b0 = static_cast<uint8_t>(s[0]);
  if (len == 1) return b0;
  char32_t cp = b0 & (0xFF >> (len + 1));
  for (size_t i = 1; i < len; ++i) cp = (cp << 6) | (static_cast<uint8_t>(s[i]) & 0x3F);
  return cp;
}

}  // namespace

char32_t ByteToCodePoint(uint8_t byte) { return GetTables().byte_to_cp[byte]; }

std::optional<uint8_t> CodePointToByte(char32_t cp) {
  if (cp >= 512) return std::nullopt;
  const int16_t b = GetTables().cp_to_byte[cp];
  if (b < 0) return std::nullopt;
  return static_cast<uint8_t>(b);
}

std::optional<std::string> ByteLevelToBytes(std::string_view spelled) {
  std::string out;
  out.reserve(spelled.size());
  size_t i = 0;
  while (i < spelled.size()) {
    const Utf8Step step = NextUtf8Step(spelled.substr(i));
    if (step.kind != Utf8Step::kValid) return std::nullopt;
    const std::optional<uint8_t> byte =
        CodePointToByte(DecodeCodePoint(spelled.substr(i), step.length));
    if (!byte) return std::nullopt;
    out.push_back(static_cast<char>(*byte));
    i += step.length;
  }
  return out;
}

std::string BytesToByteLevel(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) AppendCodePoint(ByteToCodePoint(static_cast<uint8_t>(c)), &out);
  return out;
}

}  // namespace deepinfer::tokenizer
