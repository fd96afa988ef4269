// The `flint` subcommands. Each cmd_<name>.cpp defines one add_<name>_command, which registers the
// subcommand on the app and sets its callback; main.cpp calls them all.
#pragma once

#include <CLI/CLI.hpp>

namespace flint::cli {

// Each add_*_command stores its result in exit_code when its callback runs.

void add_inspect_command(CLI::App& app, int& exit_code);

}  // namespace flint::cli
