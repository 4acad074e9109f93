#include "io/checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "io/io_test_util.h"
#include "io/safetensors_writer.h"

namespace deepinfer::io {
namespace {

using tensor::DType;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::TempDir;

void WriteShard(const std::filesystem::path& path, const std::vector<std::string>& names) {
  SafetensorsWriter writer;
  uint8_t value = 1;
  for (const std::string& name : names) {
    ASSERT_TRUE(writer.Add(name, DType::kU8, {2}, std::vector<uint8_t>{value, value}).ok());
    ++value;
  }
  ASSERT_TRUE(writer.WriteFile(path).ok());
}

TEST(CheckpointTest, OpensShardedDirectory) {
  TempDir dir;
  WriteShard(dir / "model-00001-of-00002.safetensors", {"a", "b"});
  WriteShard(dir / "model-00002-of-00002.safetensors", {"c"});
  ASSERT_TRUE(WriteSafetensorsIndex(dir.path(), 6,
                                    {{"a", "model-00001-of-00002.safetensors"},
                                     {"b", "model-00001-of-00002.safetensors"},
                                     {"c", "model-00002-of-00002.safetensors"}})
                  .ok());
  auto checkpoint = Checkpoint::Open(dir.path());
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  const Checkpoint& c = **checkpoint;
  EXPECT_EQ(c.shards().size(), 2u);
  EXPECT_THAT(c.TensorNames(), ElementsAre("a", "b", "c"));
  auto view = c.Get("c");
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->data<uint8_t>()[1], 1);
  EXPECT_EQ(c.ShardOf("c")->path().filename(), "model-00002-of-00002.safetensors");
  EXPECT_TRUE(c.UnlistedTensors().empty());
  auto missing = c.Get("zzz");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), base::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("tensor 'zzz' not found in checkpoint"));
}

TEST(CheckpointTest, OpensSingleFileWithoutIndex) {
  TempDir dir;
  WriteShard(dir / "model.safetensors", {"x", "y"});
  auto checkpoint = Checkpoint::Open(dir.path());
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_EQ((*checkpoint)->num_tensors(), 2u);
  EXPECT_TRUE((*checkpoint)->Contains("y"));
  auto bytes = (*checkpoint)->Bytes("y");
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ((*bytes)[0], 2);
}

TEST(CheckpointTest, IndexNamesTensorAbsentFromShard) {
  TempDir dir;
  WriteShard(dir / "s1.safetensors", {"a"});
  ASSERT_TRUE(
      WriteSafetensorsIndex(dir.path(), 4, {{"a", "s1.safetensors"}, {"b", "s1.safetensors"}})
          .ok());
  auto checkpoint = Checkpoint::Open(dir.path());
  ASSERT_FALSE(checkpoint.ok());
  EXPECT_THAT(
      checkpoint.status().message(),
      HasSubstr("tensor 'b' listed in model.safetensors.index.json is not in s1.safetensors"));
}

TEST(CheckpointTest, TensorInTwoShards) {
  TempDir dir;
  WriteShard(dir / "s1.safetensors", {"a"});
  WriteShard(dir / "s2.safetensors", {"a", "b"});
  ASSERT_TRUE(
      WriteSafetensorsIndex(dir.path(), 4, {{"a", "s1.safetensors"}, {"b", "s2.safetensors"}})
          .ok());
  auto checkpoint = Checkpoint::Open(dir.path());
  ASSERT_FALSE(checkpoint.ok());
  EXPECT_THAT(checkpoint.status().message(),
              HasSubstr("tensor 'a' is present in both s1.safetensors and s2.safetensors"));
}

TEST(CheckpointTest, MissingShardFile) {
  TempDir dir;
  ASSERT_TRUE(WriteSafetensorsIndex(dir.path(), 4, {{"a", "gone.safetensors"}}).ok());
  auto checkpoint = Checkpoint::Open(dir.path());
  ASSERT_FALSE(checkpoint.ok());
  EXPECT_EQ(checkpoint.status().code(), base::StatusCode::kNotFound);
  EXPECT_THAT(checkpoint.status().message(), HasSubstr("gone.safetensors: cannot open"));
}

TEST(CheckpointTest, MalformedIndex) {
  TempDir dir;
  testing::WriteText(dir / "model.safetensors.index.json", "{\"weight_map\": [}");
  EXPECT_THAT(Checkpoint::Open(dir.path()).status().message(), HasSubstr("malformed JSON"));
  testing::WriteText(dir / "model.safetensors.index.json", R"({"metadata": {}})");
  EXPECT_THAT(Checkpoint::Open(dir.path()).status().message(),
              HasSubstr("missing object 'weight_map'"));
  testing::WriteText(dir / "model.safetensors.index.json",
                     R"({"weight_map": {"a": "../etc/passwd"}})");
  EXPECT_THAT(Checkpoint::Open(dir.path()).status().message(),
              HasSubstr("weight_map['a'] = '../etc/passwd' is not a file name"));
}

TEST(CheckpointTest, UnlistedShardTensorsAreServedAndReported) {
  TempDir dir;
  WriteShard(dir / "s1.safetensors", {"a", "extra"});
  ASSERT_TRUE(WriteSafetensorsIndex(dir.path(), 2, {{"a", "s1.safetensors"}}).ok());
  auto checkpoint = Checkpoint::Open(dir.path());
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_THAT((*checkpoint)->UnlistedTensors(), ElementsAre("extra"));
  EXPECT_TRUE((*checkpoint)->Get("extra").ok());
}

TEST(CheckpointTest, E8M0NaNIsRejected) {
  TempDir dir;
  SafetensorsWriter writer;
  ASSERT_TRUE(
      writer.Add("ok.scale", DType::kF8E8M0, {2, 2}, std::vector<uint8_t>{0, 127, 254, 1}).ok());
  ASSERT_TRUE(writer.Add("bad.scale", DType::kF8E8M0, {3}, std::vector<uint8_t>{127, 255, 3}).ok());
  ASSERT_TRUE(writer.Add("u8", DType::kU8, {1}, std::vector<uint8_t>{255}).ok());
  ASSERT_TRUE(writer.WriteFile(dir / "model.safetensors").ok());
  auto checkpoint = Checkpoint::Open(dir.path());
  ASSERT_TRUE(checkpoint.ok());
  EXPECT_TRUE((*checkpoint)->CheckE8M0("ok.scale").ok());
  EXPECT_TRUE((*checkpoint)->CheckE8M0("u8").ok());
  const base::Status bad = (*checkpoint)->CheckE8M0("bad.scale");
  EXPECT_EQ(bad.code(), base::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.message(), HasSubstr("model.safetensors: tensor 'bad.scale': F8_E8M0 scale "
                                       "byte 255 (NaN) at element 1"));
  EXPECT_THAT((*checkpoint)->CheckAllE8M0().message(), HasSubstr("'bad.scale'"));
  EXPECT_EQ((*checkpoint)->CheckE8M0("nope").code(), base::StatusCode::kNotFound);
}

TEST(CheckpointTest, EmptyOrMissingDirectory) {
  TempDir dir;
  auto empty = Checkpoint::Open(dir.path());
  ASSERT_FALSE(empty.ok());
  EXPECT_THAT(empty.status().message(),
              HasSubstr("neither model.safetensors.index.json nor model.safetensors found"));
  EXPECT_EQ(Checkpoint::Open(dir / "nope").status().code(), base::StatusCode::kNotFound);
}

TEST(CheckpointTest, OpensGoldenCheckpoints) {
  for (const char* name : {"tiny_a", "tiny_b"}) {
    auto checkpoint = Checkpoint::Open(testing::GoldenDir(name));
    ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
    EXPECT_EQ((*checkpoint)->shards().size(), 1u);
    EXPECT_TRUE((*checkpoint)->UnlistedTensors().empty());
    auto head = (*checkpoint)->Get("head.weight");
    ASSERT_TRUE(head.ok()) << head.status();
    EXPECT_EQ(head->dim(0), 512);
  }
}

}  // namespace
}  // namespace deepinfer::io
