// `flint inspect PATH`: config, tensor table and parameter totals of a checkpoint.
// TODO(issue #2): placeholder until the model layer lands; replaced by the full command.
#include <spdlog/spdlog.h>

#include "cli/commands.h"

namespace flint::cli {

void add_inspect_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("inspect", "Print a checkpoint's config, tensors and parameter counts");
  auto path = std::make_shared<std::string>();
  cmd->add_option("path", *path, "HF directory, config.json or .gguf file")->required();
  cmd->callback([path, &exit_code] {
    spdlog::error("inspect: not built yet");
    exit_code = 1;
  });
}

}  // namespace flint::cli
