// Out-of-line failure path for FLINT_CHECK / FLINT_FAIL.
#include "core/check.h"

#include <cstdio>

namespace flint::detail {

void check_failed(const char* file, int line, const char* cond, const std::string& msg) {
  if (cond != nullptr) {
    fmt::print(stderr, "fatal: {}:{}: check failed: {}: {}\n", file, line, cond, msg);
  } else {
    fmt::print(stderr, "fatal: {}:{}: {}\n", file, line, msg);
  }
  std::fflush(stderr);
  std::abort();
}

}  // namespace flint::detail
