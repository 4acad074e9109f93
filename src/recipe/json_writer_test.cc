#include "recipe/json_writer.h"

#include <gtest/gtest.h>

namespace deepinfer::recipe {
namespace {

std::string Compact(std::string_view text) {
  Json value;
  EXPECT_TRUE(ParseJson(text, &value)) << text;
  return WriteJson(value);
}

std::string Python(std::string_view text) {
  Json value;
  EXPECT_TRUE(ParseJson(text, &value)) << text;
  return WriteJson(value, JsonStyle::kPython);
}

TEST(JsonWriterTest, FloatsFollowSerdeInCompactStyle) {
  EXPECT_EQ(Compact("1e5"), "100000.0");
  EXPECT_EQ(Compact("1e16"), "1e+16");
  EXPECT_EQ(Compact("1.5e-7"), "1.5e-7");
  EXPECT_EQ(Compact("0.00001"), "0.00001");
  EXPECT_EQ(Compact("-0.0"), "-0.0");
  EXPECT_EQ(Compact("123456789012345678901234567890"), "1.2345678901234568e+29");
  EXPECT_EQ(Compact("0.1"), "0.1");
  EXPECT_EQ(Compact("3.14159"), "3.14159");
  EXPECT_EQ(WriteJson(Json(static_cast<double>(0.7f))), "0.699999988079071");
}

TEST(JsonWriterTest, FloatsFollowPythonReprInPythonStyle) {
  EXPECT_EQ(Python("1e5"), "100000.0");
  EXPECT_EQ(Python("1e16"), "1e+16");
  EXPECT_EQ(Python("1.5e-7"), "1.5e-07");
  EXPECT_EQ(Python("0.00001"), "1e-05");
  EXPECT_EQ(Python("0.0001"), "0.0001");
  EXPECT_EQ(Python("2.5e300"), "2.5e+300");
}

TEST(JsonWriterTest, IntegersAreExact) {
  EXPECT_EQ(Compact("18446744073709551615"), "18446744073709551615");
  EXPECT_EQ(Compact("-9223372036854775808"), "-9223372036854775808");
  EXPECT_EQ(Compact("1.0"), "1.0");
  EXPECT_EQ(Compact("1"), "1");
}

TEST(JsonWriterTest, PythonStyleSeparatorsAndKeyOrder) {
  EXPECT_EQ(Python(R"({"b":1,"a":[true,null,"x"]})"), R"({"b": 1, "a": [true, null, "x"]})");
}

TEST(JsonWriterTest, StringEscapingMatchesSerde) {
  std::string out;
  AppendJsonString(&out, std::string("a\"\\/\n\t\x01\x7f"
                                     "日本"));
  EXPECT_EQ(out, "\"a\\\"\\\\/\\n\\t\\u0001\x7f日本\"");
}

TEST(JsonWriterTest, InvalidUtf8BecomesReplacementCharacter) {
  std::string out;
  AppendEscapedJsonText(&out, std::string("a\xff"
                                          "b\xe6\x97",
                                          5));
  EXPECT_EQ(out,
            "a\xEF\xBF\xBD"
            "b\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(JsonWriterTest, MalformedJsonIsRejectedWithoutThrowing) {
  Json value = 7;
  EXPECT_FALSE(ParseJson("{\"a\":", &value));
  EXPECT_EQ(value, Json(7));
}

}  // namespace
}  // namespace deepinfer::recipe
