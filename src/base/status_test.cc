#include "base/status.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "base/check.h"
#include "base/statusor.h"

namespace deepinfer::base {
namespace {

TEST(StatusTest, OkByDefault) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kOk);
  EXPECT_EQ(s.message(), "");
  EXPECT_EQ(s.ToString(), "OK");
}

TEST(StatusTest, ErrorCarriesCodeAndMessage) {
  Status s = NotFoundError("tensor 'x' missing");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "tensor 'x' missing");
  EXPECT_EQ(s.ToString(), "NOT_FOUND: tensor 'x' missing");
  EXPECT_EQ(s.WithContext("model.safetensors").message(), "model.safetensors: tensor 'x' missing");
  EXPECT_TRUE(Status().WithContext("ignored").ok());
}

TEST(StatusTest, OkCodeWithMessageIsOk) {
  Status s(StatusCode::kOk, "ignored");
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.message(), "");
}

Status FailIfNegative(int x) {
  if (x < 0) return InvalidArgumentError("negative");
  return Status::Ok();
}

Status Chain(int x) {
  DI_RETURN_IF_ERROR(FailIfNegative(x));
  return InternalError("reached end");
}

StatusOr<int> Half(int x) {
  if (x % 2 != 0) return InvalidArgumentError("odd");
  return x / 2;
}

StatusOr<int> Quarter(int x) {
  DI_ASSIGN_OR_RETURN(int half, Half(x));
  DI_ASSIGN_OR_RETURN(int quarter, Half(half));
  return quarter;
}

TEST(StatusTest, ReturnIfError) {
  EXPECT_EQ(Chain(-1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Chain(1).code(), StatusCode::kInternal);
}

TEST(StatusOrTest, ValueAndError) {
  StatusOr<int> v = Quarter(8);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, 2);
  StatusOr<int> e = Quarter(6);
  EXPECT_FALSE(e.ok());
  EXPECT_EQ(e.status().message(), "odd");
  EXPECT_EQ(e.value_or(-7), -7);
}

TEST(StatusOrTest, MoveOnlyValue) {
  StatusOr<std::unique_ptr<int>> p = std::make_unique<int>(5);
  ASSERT_TRUE(p.ok());
  std::unique_ptr<int> taken = std::move(p).value();
  EXPECT_EQ(*taken, 5);
}

TEST(CheckDeathTest, CheckAbortsWithLocation) {
  EXPECT_DEATH({ CHECK(1 + 1 == 3) << "math is broken"; },
               "status_test.cc:.*CHECK failed.*math is broken");
  EXPECT_DEATH({ CHECK_EQ(2, 3); }, "2 vs 3");
  EXPECT_DEATH({ CHECK_OK(InternalError("boom")); }, "INTERNAL: boom");
  EXPECT_DEATH(
      {
        StatusOr<int> e = InternalError("x");
        (void)e.value();
      },
      "StatusOr::value");
}

TEST(CheckTest, PassingCheckDoesNothing) {
  int evaluated = 0;
  CHECK(++evaluated == 1) << "not printed";
  EXPECT_EQ(evaluated, 1);
}

}  // namespace
}  // namespace deepinfer::base
