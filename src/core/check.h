// Invariant checks: a failed FLINT_CHECK is a bug, so it logs file:line and aborts.
// Expected failures use flint::Result instead (core/result.h).
#pragma once

#include <fmt/format.h>

#include <cstdlib>

namespace flint::detail {
[[noreturn]] void check_failed(const char* file, int line, const char* cond, const std::string& msg);
}  // namespace flint::detail

#define FLINT_CHECK(cond, ...)                                                                  \
  do {                                                                                          \
    if (!(cond)) [[unlikely]] {                                                                 \
      ::flint::detail::check_failed(__FILE__, __LINE__, #cond, ::fmt::format(__VA_ARGS__));     \
    }                                                                                           \
  } while (0)

#define FLINT_FAIL(...) ::flint::detail::check_failed(__FILE__, __LINE__, nullptr, ::fmt::format(__VA_ARGS__))
