#include "io/model_resolve.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "io/io_test_util.h"

namespace deepinfer::io {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;

// Creates hub/models--deepseek-ai--DeepSeek-V4.1-Flash-1017/snapshots/<revs> under `root`.
std::filesystem::path MakeRepo(const std::filesystem::path& hub, std::vector<std::string> revs,
                               std::optional<std::string> main_ref) {
  const auto repo = hub / "models--deepseek-ai--DeepSeek-V4.1-Flash-1017";
  for (const std::string& rev : revs) std::filesystem::create_directories(repo / "snapshots" / rev);
  if (main_ref) testing::WriteText(repo / "refs" / "main", *main_ref);
  return repo;
}

TEST(ModelResolveTest, LocalDirectoryWins) {
  TempDir dir;
  ResolveEnv env;
  env.deepinfer_hf_model_dir = "/nonexistent";
  auto resolved = ResolveModelDir(dir.path().string(), env);
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_EQ(*resolved, dir.path());
}

TEST(ModelResolveTest, EnvironmentDirectoryForDefaultModel) {
  TempDir dir;
  ResolveEnv env;
  env.deepinfer_hf_model_dir = dir.path().string();
  auto resolved = ResolveModelDir("", env);
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_EQ(*resolved, dir.path());
  resolved = ResolveModelDir(kDefaultModelId, env);
  ASSERT_TRUE(resolved.ok());
  EXPECT_EQ(*resolved, dir.path());
  env.deepinfer_hf_model_dir = (dir / "missing").string();
  EXPECT_THAT(
      ResolveModelDir("", env).status().message(),
      HasSubstr("DEEPINFER_HF_MODEL_DIR=" + (dir / "missing").string() + " is not a directory"));
}

TEST(ModelResolveTest, HfHomeCacheWithRefsMain) {
  TempDir home;
  MakeRepo(home / "hub", {"aaa111", "bbb222"}, "bbb222\n");
  ResolveEnv env;
  env.hf_home = home.path().string();
  auto resolved = ResolveModelDir("", env);
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_EQ(*resolved, home / "hub" / "models--deepseek-ai--DeepSeek-V4.1-Flash-1017" /
                           "snapshots" / "bbb222");
}

TEST(ModelResolveTest, HubCacheVariableAndHomeFallback) {
  TempDir root;
  MakeRepo(root / "hubcache", {"r1"}, "r1");
  MakeRepo(root / ".cache" / "huggingface" / "hub", {"r2"}, "r2");
  ResolveEnv env;
  env.home = root.path().string();
  auto from_home = ResolveModelDir("deepseek-ai/DeepSeek-V4.1-Flash-1017", env);
  ASSERT_TRUE(from_home.ok()) << from_home.status();
  EXPECT_EQ(from_home->filename(), "r2");
  env.hf_hub_cache = (root / "hubcache").string();
  auto from_cache = ResolveModelDir("", env);
  ASSERT_TRUE(from_cache.ok()) << from_cache.status();
  EXPECT_EQ(from_cache->filename(), "r1");
}

TEST(ModelResolveTest, SingleSnapshotWithoutRefs) {
  TempDir home;
  MakeRepo(home / "hub", {"only"}, std::nullopt);
  ResolveEnv env;
  env.hf_home = home.path().string();
  auto resolved = ResolveModelDir("", env);
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_EQ(resolved->filename(), "only");
}

TEST(ModelResolveTest, AmbiguousSnapshotsWithoutRefs) {
  TempDir home;
  MakeRepo(home / "hub", {"a", "b"}, std::nullopt);
  ResolveEnv env;
  env.hf_home = home.path().string();
  auto resolved = ResolveModelDir("", env);
  ASSERT_FALSE(resolved.ok());
  EXPECT_THAT(resolved.status().message(), HasSubstr("no refs/main and 2 snapshots"));
}

TEST(ModelResolveTest, RefsMainNamesMissingSnapshot) {
  TempDir home;
  MakeRepo(home / "hub", {"a"}, "zzz");
  ResolveEnv env;
  env.hf_home = home.path().string();
  auto resolved = ResolveModelDir("", env);
  ASSERT_FALSE(resolved.ok());
  EXPECT_EQ(resolved.status().code(), base::StatusCode::kNotFound);
  EXPECT_THAT(resolved.status().message(), HasSubstr("refs/main names revision 'zzz'"));
}

TEST(ModelResolveTest, NotInCache) {
  TempDir home;
  ResolveEnv env;
  env.hf_home = home.path().string();
  auto resolved = ResolveModelDir("", env);
  ASSERT_FALSE(resolved.ok());
  EXPECT_THAT(resolved.status().message(),
              HasSubstr("model 'deepseek-ai/DeepSeek-V4.1-Flash-1017' not found"));
  EXPECT_THAT(resolved.status().message(), HasSubstr("DEEPINFER_HF_MODEL_DIR is not set"));
  EXPECT_THAT(ResolveModelDir("not-an-id", env).status().message(),
              HasSubstr("neither a directory nor a Hugging Face id"));
  EXPECT_THAT(ResolveModelDir("a/../b", env).status().message(),
              HasSubstr("neither a directory nor a Hugging Face id"));
  EXPECT_THAT(ResolveModelDir("", ResolveEnv{}).status().message(),
              HasSubstr("HF_HUB_CACHE, HF_HOME and HOME are all unset"));
}

}  // namespace
}  // namespace deepinfer::io
