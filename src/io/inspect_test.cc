#include "io/inspect.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "io/checkpoint.h"
#include "io/io_test_util.h"
#include "io/safetensors_writer.h"

namespace deepinfer::io {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;

TEST(InspectTest, GoldenTinyAIsValid) {
  auto report = InspectModel(testing::GoldenDir("tiny_a"));
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->check.ok());
  EXPECT_EQ(report->num_tensors, 657u);
  EXPECT_EQ(report->check.num_checked, 657);
  // tiny_a: 8 layers x 8 experts x 3 matrices x 64 x 128 FP4 parameters.
  EXPECT_EQ(report->parameters_by_part[static_cast<int>(ModelPart::kExperts)],
            int64_t{8} * 8 * 3 * 64 * 128);
  EXPECT_EQ(report->parameters_by_part[static_cast<int>(ModelPart::kVision)], 0);
  // The golden's index.json says total_size 3042392.
  EXPECT_EQ(report->total_bytes, 3042392u);
  const std::string text = FormatInspectReport(*report);
  EXPECT_THAT(text, HasSubstr("all 657 expected tensors valid"));
  EXPECT_THAT(text, HasSubstr("compress_ratios: [0,0,2,2,2,1,1,1]"));
  EXPECT_THAT(text, HasSubstr("f8_e8m0"));
  EXPECT_THAT(text, HasSubstr("E8M0 scales: no NaN bytes"));
  EXPECT_TRUE(report->valid());
}

TEST(InspectTest, GoldenTinyBIsValid) {
  auto report = InspectModel(testing::GoldenDir("tiny_b"));
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->check.ok());
  EXPECT_EQ(report->check.num_checked, 1061);
}

// Copies tiny_a's config and checkpoint with one tensor dropped, one retyped, one added.
TEST(InspectTest, ListsMissingExtraAndMismatchedTensors) {
  TempDir dir;
  const auto golden = testing::GoldenDir("tiny_a");
  std::filesystem::copy_file(golden / "config.json", dir / "config.json");
  auto checkpoint = Checkpoint::Open(golden);
  ASSERT_TRUE(checkpoint.ok());
  SafetensorsWriter writer;
  for (const std::string& name : (*checkpoint)->TensorNames()) {
    if (name == "layers.3.attn.wkv.scale") continue;
    const SafetensorsTensorInfo* info = (*checkpoint)->Find(name);
    auto bytes = (*checkpoint)->Bytes(name);
    ASSERT_TRUE(bytes.ok());
    const tensor::DType dtype = name == "layers.0.attn_sink" || name == "layers.0.attn.attn_sink"
                                    ? tensor::DType::kI32
                                    : info->dtype;
    ASSERT_TRUE(writer.Add(name, dtype, info->shape.ToVector(), *bytes).ok());
  }
  ASSERT_TRUE(writer.Add("layers.0.bogus", tensor::DType::kU8, {1}, std::vector<uint8_t>{0}).ok());
  ASSERT_TRUE(writer.WriteFile(dir / "model.safetensors").ok());

  auto report = InspectModel(dir.path());
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_FALSE(report->check.ok());
  const std::string text = FormatInspectReport(*report);
  EXPECT_THAT(text, HasSubstr("missing tensors (1):\n  layers.3.attn.wkv.scale\n"));
  EXPECT_THAT(text, HasSubstr("extra tensors (1):\n  layers.0.bogus\n"));
  EXPECT_THAT(text, HasSubstr("layers.0.attn.attn_sink: expected f32[4], found i32[4]"));
  EXPECT_THAT(text, HasSubstr("INVALID: 1 missing, 1 extra, 1 mismatched (655 valid)"));
}

TEST(InspectTest, RejectsE8M0NaNScale) {
  TempDir dir;
  const auto golden = testing::GoldenDir("tiny_a");
  std::filesystem::copy_file(golden / "config.json", dir / "config.json");
  auto checkpoint = Checkpoint::Open(golden);
  ASSERT_TRUE(checkpoint.ok());
  SafetensorsWriter writer;
  for (const std::string& name : (*checkpoint)->TensorNames()) {
    const SafetensorsTensorInfo* info = (*checkpoint)->Find(name);
    auto bytes = (*checkpoint)->Bytes(name);
    ASSERT_TRUE(bytes.ok());
    std::vector<uint8_t> copy(bytes->begin(), bytes->end());
    if (name == "layers.2.attn.wkv.scale") copy[3] = 255;
    ASSERT_TRUE(writer.Add(name, info->dtype, info->shape.ToVector(), copy).ok());
  }
  ASSERT_TRUE(writer.WriteFile(dir / "model.safetensors").ok());

  auto report = InspectModel(dir.path());
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->check.ok());
  EXPECT_FALSE(report->valid());
  EXPECT_THAT(report->scale_error,
              HasSubstr("tensor 'layers.2.attn.wkv.scale': F8_E8M0 scale byte 255 (NaN) at "
                        "element 3"));
  EXPECT_THAT(FormatInspectReport(*report), HasSubstr("INVALID: E8M0 scale holds NaN (255)"));
  InspectOptions skip;
  skip.scan_scales = false;
  auto unscanned = InspectModel(dir.path(), skip);
  ASSERT_TRUE(unscanned.ok());
  EXPECT_TRUE(unscanned->valid());
}

TEST(InspectTest, BadConfigIsAnError) {
  TempDir dir;
  testing::WriteText(dir / "config.json", "{");
  auto report = InspectModel(dir.path());
  ASSERT_FALSE(report.ok());
  EXPECT_THAT(report.status().message(), HasSubstr("config.json: malformed JSON"));
}

}  // namespace
}  // namespace deepinfer::io
