// flint: one binary for serve, generate, bench, inspect and convert.
#include <cstdio>

#include "cli/commands.h"
#include "core/log.h"

int main(int argc, char** argv) {
  CLI::App app{"flint-serve: a native inference server for Recursive's Flint model"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "flint 0.1.0");
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, critical or off");
  app.parse_complete_callback([&] { flint::init_logging(log_level); });

  int exit_code = 0;
  flint::cli::add_inspect_command(app, exit_code);
#ifdef FLINT_HAVE_CUDA
  flint::cli::add_bench_command(app, exit_code);
#endif
  flint::cli::add_convert_command(app, exit_code);
#ifdef FLINT_HAVE_TOKENIZER
  flint::cli::add_generate_command(app, exit_code);
#endif
#ifdef FLINT_HAVE_SERVER
  flint::cli::add_serve_command(app, exit_code);
#endif
#ifdef FLINT_HAVE_HUB
  flint::cli::add_download_command(app, exit_code);
#endif

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 1;  // usage errors (unknown flags too) exit 1
  }
  return exit_code;
}
