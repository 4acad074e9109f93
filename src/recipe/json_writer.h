// JSON text in the exact formats the recipe contract uses.
//
// Two styles, both over nlohmann::ordered_json (object key insertion order is preserved):
//   * Compact: serde_json's output (no spaces, `/` and non-ASCII not escaped, control
//     characters as \u00xx lowercase, floats as Rust shortest round-trip with "e+NN"/"e-NN").
//   * Python: Python json.dumps style used inside prompts (", " and ": " separators, floats as
//     Python repr: 1e-05, 1e+16, 100000.0).
// Invalid UTF-8 inside strings is written as U+FFFD (never throws).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace deepinfer::recipe {

using Json = nlohmann::ordered_json;

enum class JsonStyle { kCompact, kPython };

// Serializes `value` in the given style.
std::string WriteJson(const Json& value, JsonStyle style = JsonStyle::kCompact);
void AppendJson(std::string* out, const Json& value, JsonStyle style = JsonStyle::kCompact);

// Appends `text` as a quoted JSON string (serde_json escaping).
void AppendJsonString(std::string* out, std::string_view text);
// Appends the escaped body of a JSON string, without the surrounding quotes.
void AppendEscapedJsonText(std::string* out, std::string_view text);

// A finite double in the given style ("1.0", "1e+16", "1.5e-7" / "1.5e-07"); non-finite
// numbers give "null" (serde_json behaviour).
std::string FormatDouble(double value, JsonStyle style);

// Deepest array/object nesting accepted anywhere in the recipe (the writer recurses).
inline constexpr size_t kMaxJsonDepth = 256;

// Parses JSON text, preserving key order. Returns false (and leaves `out` untouched) on
// malformed input or nesting deeper than kMaxJsonDepth; `error` receives the reason when
// non-null. Never throws.
bool ParseJson(std::string_view text, Json* out, std::string* error = nullptr);

// Nesting depth of a value (0 for scalars), computed without recursion.
size_t JsonDepth(const Json& value);

}  // namespace deepinfer::recipe
