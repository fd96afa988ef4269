// Logging setup: one stderr sink; stdout is reserved for command output.
#include "core/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

namespace flint {

void init_logging(std::string_view level) {
  auto logger = spdlog::stderr_color_mt("flint");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("%Y-%m-%d %H:%M:%S.%e %^%l%$ %v");
  spdlog::set_level(spdlog::level::from_str(std::string(level)));
}

}  // namespace flint
