// The `flint` subcommands. Each cmd_<name>.cpp defines one add_<name>_command, which registers the
// subcommand on the app and sets its callback; main.cpp calls them all.
#pragma once

#include <CLI/CLI.hpp>

namespace flint::cli {

// Each add_*_command stores its result in exit_code when its callback runs.

void add_inspect_command(CLI::App& app, int& exit_code);
#ifdef FLINT_HAVE_CUDA
void add_bench_command(CLI::App& app, int& exit_code);
#endif
void add_convert_command(CLI::App& app, int& exit_code);
void add_generate_command(CLI::App& app, int& exit_code);
void add_download_command(CLI::App& app, int& exit_code);
void add_serve_command(CLI::App& app, int& exit_code);

}  // namespace flint::cli
