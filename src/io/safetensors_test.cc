#include "io/safetensors.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "io/io_test_util.h"
#include "io/safetensors_writer.h"

namespace deepinfer::io {
namespace {

using tensor::DType;
using ::testing::HasSubstr;
using testing::RawSafetensors;
using testing::TempDir;
using testing::WriteText;

// Opens a file made of `contents` and returns the error (the test fails if it opens).
base::Status OpenError(const TempDir& dir, const std::string& contents) {
  const auto path = dir / "bad.safetensors";
  WriteText(path, contents);
  auto file = SafetensorsFile::Open(path);
  EXPECT_FALSE(file.ok());
  return file.ok() ? base::Status() : file.status();
}

std::vector<uint8_t> F32Bytes(std::vector<float> values) {
  std::vector<uint8_t> bytes(values.size() * 4);
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

TEST(SafetensorsWriterTest, RoundTripWithAlignmentAndMetadata) {
  TempDir dir;
  SafetensorsWriter writer;
  const std::vector<uint8_t> one_byte{7};
  ASSERT_TRUE(writer.Add("a.bool", DType::kBool, {1}, one_byte).ok());
  ASSERT_TRUE(writer.Add("b.f32", DType::kF32, {2, 2}, F32Bytes({1, 2, 3, 4})).ok());
  const std::vector<uint8_t> fp4{0x21, 0x43};
  ASSERT_TRUE(writer.Add("c.fp4", DType::kFP4E2M1, {4}, fp4).ok());
  const std::vector<uint8_t> i64(16, 0xAB);
  ASSERT_TRUE(writer.Add("d.i64", DType::kI64, {2}, i64).ok());
  ASSERT_TRUE(writer.Add("e.empty", DType::kBF16, {0, 3}, {}).ok());
  writer.SetMetadata({{"format", "pt"}});
  EXPECT_EQ(writer.data_bytes(), 1u + 16 + 2 + 16);
  const auto path = dir / "x.safetensors";
  ASSERT_TRUE(writer.WriteFile(path).ok());

  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  const SafetensorsFile& f = **file;
  EXPECT_EQ(f.tensors().size(), 5u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  auto b = f.Get("b.f32");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->shape(), (tensor::Shape{2, 2}));
  EXPECT_EQ(b->data<float>()[3], 4.0f);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data()) % 4, 0u);
  auto d = f.Get("d.i64");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(d->data()) % 8, 0u);
  auto c = f.Bytes("c.fp4");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(std::vector<uint8_t>(c->begin(), c->end()), fp4);
  EXPECT_EQ(f.Find("a.bool")->dtype, DType::kBool);
  auto empty = f.Get("e.empty");
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->NumElements(), 0);
  // The header is padded so that the data section starts at a multiple of 8.
  const std::string raw = testing::ReadText(path);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | static_cast<uint8_t>(raw[i]);
  EXPECT_EQ((8 + header_len) % 8, 0u);
  EXPECT_EQ(raw[8 + header_len - 1] == ' ' || raw[8 + header_len - 1] == '}', true);
}

TEST(SafetensorsWriterTest, RejectsBadInput) {
  SafetensorsWriter writer;
  EXPECT_THAT(writer.Add("x", DType::kF32, {3}, std::vector<uint8_t>(8)).message(),
              HasSubstr("tensor 'x': 8 bytes given, f32[3] needs 12"));
  ASSERT_TRUE(writer.Add("x", DType::kF32, {1}, std::vector<uint8_t>(4)).ok());
  EXPECT_THAT(writer.Add("x", DType::kF32, {1}, std::vector<uint8_t>(4)).message(),
              HasSubstr("duplicate tensor 'x'"));
  EXPECT_FALSE(writer.Add("__metadata__", DType::kU8, {1}, std::vector<uint8_t>(1)).ok());
  EXPECT_THAT(writer.WriteFile("/nonexistent-dir/x.safetensors").message(),
              HasSubstr("/nonexistent-dir/x.safetensors"));
}

TEST(SafetensorsWriterTest, WritesIndex) {
  TempDir dir;
  ASSERT_TRUE(WriteSafetensorsIndex(dir.path(), 123, {{"a", "s1"}, {"b", "s2"}}).ok());
  const auto index = nlohmann::json::parse(testing::ReadText(dir / "model.safetensors.index.json"));
  EXPECT_EQ(index["metadata"]["total_size"], 123);
  EXPECT_EQ(index["weight_map"]["b"], "s2");
}

TEST(SafetensorsReaderTest, ReadsGoldenCheckpoint) {
  auto file = SafetensorsFile::Open(testing::GoldenDir("tiny_a") / "model.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->tensors().size(), 657u);
  EXPECT_EQ((*file)->metadata().at("format"), "pt");
  auto embed = (*file)->Get("embed.weight");
  ASSERT_TRUE(embed.ok()) << embed.status();
  EXPECT_EQ(embed->dtype(), DType::kBF16);
  EXPECT_EQ(embed->shape(), (tensor::Shape{512, 128}));
  auto scale = (*file)->Get("layers.1.engram.embed.scale");
  ASSERT_TRUE(scale.ok());
  EXPECT_EQ(scale->dtype(), DType::kF8E8M0);
}

TEST(SafetensorsReaderTest, MissingFileIsNotFound) {
  auto file = SafetensorsFile::Open("/nonexistent/m.safetensors");
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), base::StatusCode::kNotFound);
  EXPECT_THAT(file.status().message(), HasSubstr("/nonexistent/m.safetensors"));
}

TEST(SafetensorsReaderTest, MissingTensorNamesFileAndTensor) {
  TempDir dir;
  SafetensorsWriter writer;
  ASSERT_TRUE(writer.Add("a", DType::kF32, {1}, F32Bytes({1})).ok());
  ASSERT_TRUE(writer.WriteFile(dir / "m.safetensors").ok());
  auto file = SafetensorsFile::Open(dir / "m.safetensors");
  ASSERT_TRUE(file.ok());
  auto missing = (*file)->Get("nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), base::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("m.safetensors: tensor 'nope' not found"));
}

// ---- one test per malformed-input kind ------------------------------------------------------

TEST(SafetensorsErrorTest, FileTooSmall) {
  TempDir dir;
  const auto status = OpenError(dir, "abc");
  EXPECT_EQ(status.code(), base::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("bad.safetensors: file too small"));
}

TEST(SafetensorsErrorTest, EmptyFile) {
  TempDir dir;
  EXPECT_THAT(OpenError(dir, "").message(), HasSubstr("file too small"));
}

TEST(SafetensorsErrorTest, HeaderLargerThanFile) {
  TempDir dir;
  const auto status = OpenError(dir, RawSafetensors("{}", 0, /*declared_len=*/1000));
  EXPECT_THAT(status.message(), HasSubstr("header length 1000 larger than file (10 bytes)"));
  EXPECT_THAT(OpenError(dir, RawSafetensors("{}", 0, UINT64_MAX - 1)).message(),
              HasSubstr("larger than file"));
}

TEST(SafetensorsErrorTest, MalformedJson) {
  TempDir dir;
  const auto status = OpenError(dir, RawSafetensors(R"({"a": {"dtype": "F32",)", 0));
  EXPECT_EQ(status.code(), base::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("bad.safetensors: malformed JSON header"));
}

TEST(SafetensorsErrorTest, TopLevelNotObject) {
  TempDir dir;
  EXPECT_THAT(OpenError(dir, RawSafetensors("[1, 2]", 0)).message(),
              HasSubstr("top level is not an object"));
}

TEST(SafetensorsErrorTest, DeepNesting) {
  TempDir dir;
  const std::string deep = R"({"a": )" + std::string(100000, '[') + std::string(100000, ']') + "}";
  EXPECT_THAT(OpenError(dir, RawSafetensors(deep, 0)).message(), HasSubstr("nested deeper"));
}

TEST(SafetensorsErrorTest, UnknownDtype) {
  TempDir dir;
  const auto status = OpenError(
      dir, RawSafetensors(R"({"w": {"dtype": "F7", "shape": [1], "data_offsets": [0, 1]}})", 1));
  EXPECT_THAT(status.message(), HasSubstr("bad.safetensors: tensor 'w': unknown dtype 'F7'"));
}

TEST(SafetensorsErrorTest, ShapeSizeMismatch) {
  TempDir dir;
  const auto status = OpenError(
      dir,
      RawSafetensors(R"({"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 20]}})", 20));
  EXPECT_THAT(status.message(),
              HasSubstr("tensor 'w': shape [2, 3] of f32 needs 24 bytes but data_offsets span 20"));
}

TEST(SafetensorsErrorTest, OffsetsOutOfRange) {
  TempDir dir;
  const auto status = OpenError(
      dir, RawSafetensors(R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", 8));
  EXPECT_THAT(status.message(),
              HasSubstr("tensor 'w': data_offsets [0, 16] out of range (data section is 8 bytes)"));
}

TEST(SafetensorsErrorTest, OffsetsReversed) {
  TempDir dir;
  const auto status = OpenError(
      dir, RawSafetensors(R"({"w": {"dtype": "U8", "shape": [0], "data_offsets": [4, 2]}})", 8));
  EXPECT_THAT(status.message(), HasSubstr("tensor 'w': data_offsets [4, 2] out of range"));
}

TEST(SafetensorsErrorTest, OverlappingTensors) {
  TempDir dir;
  const auto status =
      OpenError(dir, RawSafetensors(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                              "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                                    12));
  EXPECT_THAT(status.message(), HasSubstr("bad.safetensors: tensors 'a' and 'b' overlap"));
}

TEST(SafetensorsErrorTest, DuplicateNames) {
  TempDir dir;
  const auto status =
      OpenError(dir, RawSafetensors(R"({"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},
                              "a": {"dtype": "U8", "shape": [1], "data_offsets": [1, 2]}})",
                                    2));
  EXPECT_THAT(status.message(), HasSubstr("bad.safetensors: duplicate tensor name 'a'"));
}

TEST(SafetensorsErrorTest, BadShapeEntries) {
  TempDir dir;
  EXPECT_THAT(
      OpenError(dir, RawSafetensors(
                         R"({"w": {"dtype": "U8", "shape": [-1], "data_offsets": [0, 0]}})", 0))
          .message(),
      HasSubstr("tensor 'w': invalid shape entry -1"));
  EXPECT_THAT(
      OpenError(dir, RawSafetensors(
                         R"({"w": {"dtype": "U8", "shape": [1.5], "data_offsets": [0, 0]}})", 0))
          .message(),
      HasSubstr("invalid shape entry 1.5"));
  EXPECT_THAT(
      OpenError(
          dir,
          RawSafetensors(
              R"({"w": {"dtype": "F64", "shape": [4294967296, 4294967296, 4294967296], "data_offsets": [0, 0]}})",
              0))
          .message(),
      HasSubstr("tensor 'w': shape too large"));
  EXPECT_THAT(OpenError(dir, RawSafetensors(R"({"w": {"dtype": "U8", "data_offsets": [0, 0]}})", 0))
                  .message(),
              HasSubstr("tensor 'w': missing or non-array 'shape'"));
}

TEST(SafetensorsErrorTest, BadEntryFields) {
  TempDir dir;
  EXPECT_THAT(OpenError(dir, RawSafetensors(R"({"w": 5})", 0)).message(),
              HasSubstr("tensor 'w': entry is not an object"));
  EXPECT_THAT(OpenError(dir, RawSafetensors(R"({"w": {"shape": [], "data_offsets": [0, 1]}})", 1))
                  .message(),
              HasSubstr("tensor 'w': missing or non-string 'dtype'"));
  EXPECT_THAT(OpenError(dir, RawSafetensors(
                                 R"({"w": {"dtype": "U8", "shape": [1], "data_offsets": [0]}})", 1))
                  .message(),
              HasSubstr("tensor 'w': 'data_offsets' must be two unsigned integers"));
  EXPECT_THAT(
      OpenError(dir,
                RawSafetensors(
                    R"({"w": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1], "x": 1}})", 1))
          .message(),
      HasSubstr("tensor 'w': unknown key 'x'"));
}

TEST(SafetensorsErrorTest, BadMetadata) {
  TempDir dir;
  EXPECT_THAT(OpenError(dir, RawSafetensors(R"({"__metadata__": {"format": 1}})", 0)).message(),
              HasSubstr("__metadata__ value of 'format' is not a string"));
  EXPECT_THAT(OpenError(dir, RawSafetensors(R"({"__metadata__": []})", 0)).message(),
              HasSubstr("__metadata__ is not an object"));
}

TEST(SafetensorsErrorTest, MisalignedTensorIsReportedOnGet) {
  TempDir dir;
  // Pad the header so that the data section (and the F32 at data offset 0) is misaligned.
  std::string header = R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})";
  while ((8 + header.size()) % 4 == 0) header += ' ';
  const auto path = dir / "mis.safetensors";
  WriteText(path, RawSafetensors(header, 4));
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  auto view = (*file)->Get("w");
  ASSERT_FALSE(view.ok());
  EXPECT_EQ(view.status().code(), base::StatusCode::kFailedPrecondition);
  EXPECT_THAT(view.status().message(),
              HasSubstr("tensor 'w': data at file offset " + std::to_string(8 + header.size())));
  EXPECT_TRUE((*file)->Bytes("w").ok());
}

// A header with 100k entries (more than the release's 92k tensors in one file) must parse in
// linear time: a quadratic parser would make this test take minutes.
TEST(SafetensorsReaderTest, LargeHeaderParses) {
  std::string header = "{";
  constexpr int kCount = 100000;
  for (int i = 0; i < kCount; ++i) {
    header += fmt::format(R"({}"t{}": {{"dtype": "U8", "shape": [1], "data_offsets": [{}, {}]}})",
                          i ? "," : "", i, i, i + 1);
  }
  header += "}";
  auto parsed = ParseSafetensorsHeaderJson(header, kCount, "big");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->tensors.size(), static_cast<size_t>(kCount));
  header.insert(header.size() - 1,
                R"(,"t5": {"dtype": "U8", "shape": [0], "data_offsets": [0, 0]})");
  EXPECT_THAT(ParseSafetensorsHeaderJson(header, kCount, "big").status().message(),
              HasSubstr("big: duplicate tensor name 't5'"));
}

TEST(SafetensorsErrorTest, HeaderJsonEntryPointValidatesDataSize) {
  auto header = ParseSafetensorsHeaderJson(
      R"({"w": {"dtype": "BF16", "shape": [3], "data_offsets": [0, 6]}})", 5, "label");
  ASSERT_FALSE(header.ok());
  EXPECT_THAT(header.status().message(), HasSubstr("label: tensor 'w': data_offsets [0, 6]"));
  auto ok = ParseSafetensorsHeaderJson(
      R"({"w": {"dtype": "BF16", "shape": [3], "data_offsets": [0, 6]}})", 6, "label");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->tensors[0].dtype, DType::kBF16);
}

}  // namespace
}  // namespace deepinfer::io
