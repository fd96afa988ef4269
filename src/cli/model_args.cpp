// Resolution of model arguments through src/hub when it is built, and of --device.
#include "cli/model_args.h"

#include <spdlog/spdlog.h>

#include <filesystem>

#ifdef FLINT_HAVE_CUDA
#include "backends/cuda/memory_plan.h"
#endif

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

Result<std::optional<model::FlintConfig>> load_config_override(std::string_view command,
                                                               const std::string& hf_config_path) {
  if (hf_config_path.empty()) return std::optional<model::FlintConfig>();
  auto c = model::FlintConfig::from_hf_path(hf_config_path);
  if (!c) return c.error().with_context("{}: --hf-config-path {}", command, hf_config_path);
  return std::optional<model::FlintConfig>(std::move(*c));
}

Result<Device> resolve_device(const std::string& flag) {
  if (flag != "auto" && flag != "cuda" && flag != "cpu") {
    return make_error(ErrorCode::kInvalidArgument, "--device must be auto, cuda or cpu, got '{}'",
                      flag);
  }
  if (flag == "cpu") {
    spdlog::info("device: cpu (--device cpu)");
    return Device::kCpu;
  }
#ifdef FLINT_HAVE_CUDA
  auto gpu = cuda::gpu_info();
  if (gpu) {
    spdlog::info("device: cuda ({}, {:.1f} GiB, {} visible){}", gpu->name,
                 static_cast<double>(gpu->total) / 1073741824.0, gpu->device_count,
                 flag == "auto" ? " (--device auto)" : "");
    return Device::kCuda;
  }
  if (flag == "cuda") return gpu.error().with_context("--device cuda");
  spdlog::info("device: cpu (--device auto: {})", gpu.error().message);
  return Device::kCpu;
#else
  if (flag == "cuda") {
    return make_error(ErrorCode::kUnsupported,
                      "--device cuda: this flint was built without CUDA (configure with "
                      "-DFLINT_CUDA=ON on a machine with nvcc)");
  }
  spdlog::info("device: cpu (--device auto: this flint was built without CUDA)");
  return Device::kCpu;
#endif
}

}  // namespace flint::cli
