// Resolution of model arguments through src/hub when it is built.
#include "cli/model_args.h"

#include <filesystem>

#ifdef FLINT_HAVE_HUB
#include "hub/resolve.h"
#endif

namespace flint::cli {

Result<std::string> resolve_model_arg(const std::string& spec, ArgKind kind) {
  std::error_code ec;
  if (std::filesystem::exists(spec, ec)) return spec;
#ifdef FLINT_HAVE_HUB
  hub::ResolveOptions opts;
  opts.progress_bar = true;
  const hub::Need need = kind == ArgKind::kModel    ? hub::Need::kModel
                         : kind == ArgKind::kConfig ? hub::Need::kConfig
                                                    : hub::Need::kTokenizer;
  return hub::resolve(spec, need, opts);
#else
  (void)kind;
  return make_error(ErrorCode::kNotFound,
                    "{}: no such file or directory (this build has no Hugging Face "
                    "Hub support)",
                    spec);
#endif
}

Status resolve_model_args(std::string& model, std::string& tokenizer, std::string& hf_config_path) {
  FLINT_ASSIGN_OR_RETURN(model, resolve_model_arg(model, ArgKind::kModel));
  if (!tokenizer.empty()) {
    FLINT_ASSIGN_OR_RETURN(tokenizer, resolve_model_arg(tokenizer, ArgKind::kTokenizer));
  }
  if (!hf_config_path.empty()) {
    FLINT_ASSIGN_OR_RETURN(hf_config_path, resolve_model_arg(hf_config_path, ArgKind::kConfig));
  }
  return ok();
}

}  // namespace flint::cli
