#include "tokenizer/utf8.h"

#include <cstdint>

namespace deepinfer::tokenizer {
namespace {

bool InRange(uint8_t b, uint8_t lo, uint8_t hi) { return b >= lo && b <= hi; }

}  // namespace

Utf8Step NextUtf8Step(std::string_view bytes) {
  const auto lead = static_cast<uint8_t>(bytes[0]);
  if (lead < 0x80) return {Utf8Step::kValid, 1};
  size_t need;                   // continuation bytes required
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the first continuation byte
  if (InRange(lead, 0xC2, 0xDF)) {
    need = 1;
  } else if (lead == 0xE0) {
    need = 2, lo = 0xA0;
  } else if (InRange(lead, 0xE1, 0xEC) || InRange(lead, 0xEE, 0xEF)) {
    need = 2;
  } else if (lead == 0xED) {
    need = 2, hi = 0x9F;
  } else if (lead == 0xF0) {
    need = 3, lo = 0x90;
  } else if (InRange(lead, 0xF1, 0xF3)) {
    need = 3;
  } else if (lead == 0xF4) {
    need = 3, hi = 0x8F;
  } else {
    return {Utf8Step::kInvalid, 1};
  }
  for (size_t i = 1; i <= need; ++i) {
    if (i >= bytes.size()) return {Utf8Step::kTruncated, i};
    const auto b = static_cast<uint8_t>(bytes[i]);
    const bool ok = i == 1 ? InRange(b, lo, hi) : InRange(b, 0x80, 0xBF);
    if (!ok) return {Utf8Step::kInvalid, i};
  }
  return {Utf8Step::kValid, need + 1};
}

bool IsValidUtf8(std::string_view bytes) {
  size_t i = 0;
  while (i < bytes.size()) {
    // ASCII fast path, 8 bytes at a time.
    while (i + 8 <= bytes.size()) {
      uint64_t word;
      __builtin_memcpy(&word, bytes.data() + i, 8);
      if (word & 0x8080808080808080ULL) break;
      i += 8;
    }
    if (i >= bytes.size()) break;
    const Utf8Step step = NextUtf8Step(bytes.substr(i));
    if (step.kind != Utf8Step::kValid) return false;
    i += step.length;
  }
  return true;
}

void AppendUtf8Lossy(std::string_view bytes, std::string* out) {
  size_t i = 0;
  while (i < bytes.size()) {
    const Utf8Step step = NextUtf8Step(bytes.substr(i));
    if (step.kind == Utf8Step::kValid) {
      out->append(bytes.substr(i, step.length));
    } else {
      out->append(kReplacementChar);
    }
    i += step.length;
  }
}

std::string_view SanitizeUtf8(std::string_view bytes, std::string* storage) {
  if (IsValidUtf8(bytes)) return bytes;
  storage->clear();
  storage->reserve(bytes.size() + 16);
  AppendUtf8Lossy(bytes, storage);
  return *storage;
}

}  // namespace deepinfer::tokenizer
