// `flint download SPEC`: resolves a model, tokenizer or config argument through the HF cache
// (downloading what is missing unless HF_HUB_OFFLINE=1) and prints the local path.
#include <spdlog/spdlog.h>

#include <cstdio>
#include <map>

#include "cli/commands.h"
#include "hub/resolve.h"

namespace flint::cli {

void add_download_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand(
      "download", "Fetch a Hugging Face repo into the shared HF cache and print its local path");
  struct Args {
    std::string spec;
    std::string need = "model";
    int parallel = 4;
  };
  auto args = std::make_shared<Args>();
  cmd->add_option("spec", args->spec, "org/name[@revision][:TAG] or a local path")->required();
  cmd->add_option("--need", args->need, "what to fetch: model, config or tokenizer")
      ->check(CLI::IsMember({"model", "config", "tokenizer"}));
  cmd->add_option("--parallel", args->parallel, "files downloaded at once")
      ->check(CLI::Range(1, 32));
  cmd->callback([args, &exit_code] {
    static const std::map<std::string, hub::Need> kNeeds = {{"model", hub::Need::kModel},
                                                            {"config", hub::Need::kConfig},
                                                            {"tokenizer", hub::Need::kTokenizer}};
    hub::ResolveOptions opts;
    opts.parallel_downloads = args->parallel;
    opts.progress_bar = true;
    auto path = hub::resolve(args->spec, kNeeds.at(args->need), opts);
    if (!path) {
      spdlog::error("{}", path.error().message);
      exit_code = 1;
      return;
    }
    fmt::print("{}\n", *path);
  });
}

}  // namespace flint::cli
