// CHECK / DCHECK: abort with file:line and a message when an invariant is broken.
//
//   CHECK(ptr != nullptr) << "extra context " << value;
//   CHECK_EQ(a, b);  CHECK_LT(i, n);  CHECK_OK(status);
//   DCHECK(...) is compiled out (the condition is not evaluated) when NDEBUG is defined.
//
// Use these only for programming errors. Expected failures (bad input, missing files,
// out of memory budget) return Status.
#pragma once

#include <sstream>

#include "base/status.h"

namespace deepinfer::base::internal {

// Collects the message and aborts in its destructor.
class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* condition);
  [[noreturn]] ~CheckFailure();
  std::ostream& stream() { return stream_; }

 private:
  std::ostringstream stream_;
};

// Lets `CHECK(x) << ...` compile to `cond ? (void)0 : Voidify() & stream`.
struct Voidify {
  void operator&(std::ostream&) {}
};

}  // namespace deepinfer::base::internal

#define CHECK(condition)                         \
  (condition)                                    \
      ? (void)0                                  \
      : ::deepinfer::base::internal::Voidify() & \
            ::deepinfer::base::internal::CheckFailure(__FILE__, __LINE__, #condition).stream()

#define DI_CHECK_OP_(a, op, b) CHECK((a)op(b)) << "(" << (a) << " vs " << (b) << ") "
#define CHECK_EQ(a, b) DI_CHECK_OP_(a, ==, b)
#define CHECK_NE(a, b) DI_CHECK_OP_(a, !=, b)
#define CHECK_LT(a, b) DI_CHECK_OP_(a, <, b)
#define CHECK_LE(a, b) DI_CHECK_OP_(a, <=, b)
#define CHECK_GT(a, b) DI_CHECK_OP_(a, >, b)
#define CHECK_GE(a, b) DI_CHECK_OP_(a, >=, b)
#define CHECK_OK(expr)                                           \
  do {                                                           \
    const ::deepinfer::base::Status di_check_status_ = (expr);   \
    CHECK(di_check_status_.ok()) << di_check_status_.ToString(); \
  } while (0)

#ifdef NDEBUG
#define DCHECK(condition) \
  while (false) CHECK(condition)
#else
#define DCHECK(condition) CHECK(condition)
#endif
#define DCHECK_EQ(a, b) DCHECK((a) == (b))
#define DCHECK_LT(a, b) DCHECK((a) < (b))
#define DCHECK_LE(a, b) DCHECK((a) <= (b))
#define DCHECK_GE(a, b) DCHECK((a) >= (b))
