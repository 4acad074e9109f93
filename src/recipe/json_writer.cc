#include "recipe/json_writer.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace deepinfer::recipe {
namespace {

constexpr char kHexDigits[] = "0123456789abcdef";
constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";

// Length of the valid UTF-8 sequence starting at text[i], or 0 when invalid.
size_t ValidUtf8Length(std::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  size_t length = 0;
  uint32_t min_code = 0;
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) {
    length = 2;
    min_code = 0x80;
  } else if ((lead & 0xF0) == 0xE0) {
    length = 3;
    min_code = 0x800;
  } else if ((lead & 0xF8) == 0xF0) {
    length = 4;
    min_code = 0x10000;
  } else {
    return 0;
  }
  if (i + length > text.size()) return 0;
  uint32_t code = lead & (0x7F >> length);
  for (size_t k = 1; k < length; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    code = (code << 6) | (byte(i + k) & 0x3F);
  }
  if (code < min_code || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) return 0;
  return length;
}

// Splits the shortest round-trip representation of a positive finite double into its
// decimal digits and exponent: value = 0.d1d2... * 10^(exponent + 1) = d1.d2... * 10^exponent.
void ShortestDigits(double value, std::string* digits, int* exponent) {
  char buffer[64];
  auto result =
      std::to_chars(buffer, buffer + sizeof(buffer), value, std::chars_format::scientific);
  std::string_view text(buffer, result.ptr - buffer);
  const size_t e_pos = text.find('e');
  digits->clear();
  for (char c : text.substr(0, e_pos)) {
    if (c != '.') digits->push_back(c);
  }
  *exponent = std::atoi(std::string(text.substr(e_pos + 1)).c_str());
}

void AppendExponent(std::string* out, int exponent, bool two_digits) {
  out->push_back('e');
  out->push_back(exponent < 0 ? '-' : '+');
  int magnitude = exponent < 0 ? -exponent : exponent;
  std::string number = std::to_string(magnitude);
  if (two_digits && number.size() < 2) out->push_back('0');
  out->append(number);
}

void AppendMantissa(std::string* out, const std::string& digits) {
  out->push_back(digits[0]);
  if (digits.size() > 1) {
    out->push_back('.');
    out->append(digits, 1, std::string::npos);
  }
}

// Rust ryu / serde_json layout (with an explicit '+' on positive exponents).
void AppendCompactDouble(std::string* out, const std::string& digits, int exponent) {
  const int length = static_cast<int>(digits.size());
  const int point = exponent + 1;  // position of the decimal point relative to the digits
  if (point >= length && point <= 16) {
    out->append(digits);
    out->append(point - length, '0');
    out->append(".0");
  } else if (point > 0 && point <= 16) {
    out->append(digits, 0, point);
    out->push_back('.');
    out->append(digits, point, std::string::npos);
  } else if (point > -5 && point <= 0) {
    out->append("0.");
    out->append(-point, '0');
    out->append(digits);
  } else {
    AppendMantissa(out, digits);
    AppendExponent(out, exponent, /*two_digits=*/false);
  }
}

// Python float repr layout.
void AppendPythonDouble(std::string* out, const std::string& digits, int exponent) {
  const int length = static_cast<int>(digits.size());
  if (exponent >= -4 && exponent < 16) {
    if (exponent >= 0) {
      if (length <= exponent + 1) {
        out->append(digits);
        out->append(exponent + 1 - length, '0');
        out->append(".0");
      } else {
        out->append(digits, 0, exponent + 1);
        out->push_back('.');
        out->append(digits, exponent + 1, std::string::npos);
      }
    } else {
      out->append("0.");
      out->append(-exponent - 1, '0');
      out->append(digits);
    }
  } else {
    AppendMantissa(out, digits);
    AppendExponent(out, exponent, /*two_digits=*/true);
  }
}

void AppendDouble(std::string* out, double value, JsonStyle style) {
  if (!std::isfinite(value)) {
    out->append("null");
    return;
  }
  if (std::signbit(value)) out->push_back('-');
  value = std::fabs(value);
  if (value == 0) {
    out->append("0.0");
    return;
  }
  std::string digits;
  int exponent = 0;
  ShortestDigits(value, &digits, &exponent);
  if (style == JsonStyle::kCompact) {
    AppendCompactDouble(out, digits, exponent);
  } else {
    AppendPythonDouble(out, digits, exponent);
  }
}

void AppendValue(std::string* out, const Json& value, JsonStyle style) {
  const char* item_separator = style == JsonStyle::kCompact ? "," : ", ";
  const char* key_separator = style == JsonStyle::kCompact ? ":" : ": ";
  switch (value.type()) {
    case Json::value_t::null:
    case Json::value_t::discarded:
      out->append("null");
      return;
    case Json::value_t::boolean:
      out->append(value.get<bool>() ? "true" : "false");
      return;
    case Json::value_t::number_integer:
      out->append(std::to_string(value.get<int64_t>()));
      return;
    case Json::value_t::number_unsigned:
      out->append(std::to_string(value.get<uint64_t>()));
      return;
    case Json::value_t::number_float:
      AppendDouble(out, value.get<double>(), style);
      return;
    case Json::value_t::string:
      AppendJsonString(out, value.get_ref<const std::string&>());
      return;
    case Json::value_t::binary:
      out->append("null");
      return;
    case Json::value_t::array: {
      out->push_back('[');
      bool first = true;
      for (const auto& element : value) {
        if (!first) out->append(item_separator);
        first = false;
        AppendValue(out, element, style);
      }
      out->push_back(']');
      return;
    }
    case Json::value_t::object: {
      out->push_back('{');
      bool first = true;
      for (const auto& [key, element] : value.items()) {
        if (!first) out->append(item_separator);
        first = false;
        AppendJsonString(out, key);
        out->append(key_separator);
        AppendValue(out, element, style);
      }
      out->push_back('}');
      return;
    }
  }
}

}  // namespace

void AppendEscapedJsonText(std::string* out, std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    // Copy the longest run of bytes that need no attention.
    size_t run = i;
    while (run < text.size()) {
      const unsigned char c = static_cast<unsigned char>(text[run]);
      if (c < 0x20 || c == '"' || c == '\\' || c >= 0x80) break;
      ++run;
    }
    out->append(text.data() + i, run - i);
    i = run;
    if (i >= text.size()) break;
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x80) {
      const size_t length = ValidUtf8Length(text, i);
      if (length == 0) {
        out->append(kReplacementChar);
        ++i;
      } else {
        out->append(text.data() + i, length);
        i += length;
      }
      continue;
    }
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\b':
        out->append("\\b");
        break;
      case '\f':
        out->append("\\f");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
      default:
        out->append("\\u00");
        out->push_back(kHexDigits[c >> 4]);
        out->push_back(kHexDigits[c & 0xF]);
    }
    ++i;
  }
}

void AppendJsonString(std::string* out, std::string_view text) {
  out->push_back('"');
  AppendEscapedJsonText(out, text);
  out->push_back('"');
}

void AppendJson(std::string* out, const Json& value, JsonStyle style) {
  AppendValue(out, value, style);
}

std::string WriteJson(const Json& value, JsonStyle style) {
  std::string out;
  AppendValue(&out, value, style);
  return out;
}

std::string FormatDouble(double value, JsonStyle style) {
  std::string out;
  AppendDouble(&out, value, style);
  return out;
}

namespace {

// Bracket nesting depth of JSON text (brackets inside strings ignored).
size_t TextDepth(std::string_view text) {
  size_t depth = 0;
  size_t deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

}  // namespace

bool ParseJson(std::string_view text, Json* out, std::string* error) {
  if (TextDepth(text) > kMaxJsonDepth) {
    if (error != nullptr) *error = "nesting deeper than " + std::to_string(kMaxJsonDepth);
    return false;
  }
  try {
    Json parsed = Json::parse(text.begin(), text.end());
    *out = std::move(parsed);
    return true;
  } catch (const std::exception& exception) {
    if (error != nullptr) *error = exception.what();
    return false;
  }
}

size_t JsonDepth(const Json& value) {
  size_t deepest = 0;
  std::vector<std::pair<const Json*, size_t>> stack = {{&value, 0}};
  while (!stack.empty()) {
    auto [node, depth] = stack.back();
    stack.pop_back();
    if (!node->is_structured()) continue;
    deepest = std::max(deepest, depth + 1);
    for (const auto& child : *node) stack.emplace_back(&child, depth + 1);
  }
  return deepest;
}

}  // namespace deepinfer::recipe
