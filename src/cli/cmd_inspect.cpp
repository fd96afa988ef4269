// `flint inspect PATH`: config, tensor table and parameter totals of a checkpoint (an HF directory,
// a config.json alone, or a .gguf file), then a binding check. Test:
// tests/python/model/test_inspect.py.
#include <spdlog/spdlog.h>

#include <filesystem>

#include "cli/commands.h"
#include "cli/model_args.h"
#include "formats/gguf.h"
#include "formats/safetensors.h"
#include "model/config.h"
#include "model/weights.h"

namespace flint::cli {
namespace {

struct TensorRow {
  std::string name;
  std::string dtype;
  std::string shape;
  uint64_t bytes;
};

std::string human(double n) {
  if (n >= 1e9) return fmt::format("{:.1f}B", n / 1e9);
  if (n >= 1e6) return fmt::format("{:.1f}M", n / 1e6);
  if (n >= 1e3) return fmt::format("{:.1f}K", n / 1e3);
  return fmt::format("{:.0f}", n);
}

std::string layer_list(const model::FlintConfig& c, auto pred) {
  std::vector<int64_t> idx;
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    if (pred(i)) idx.push_back(i);
  }
  return fmt::format("[{}]", fmt::join(idx, ","));
}

void print_config(const model::FlintConfig& c) {
  auto row = [](std::string_view k, const auto& v) { fmt::print("  {:<34} {}\n", k, v); };
  fmt::print("config:\n");
  row("architecture", c.architecture);
  row("vocab_size", c.vocab_size);
  row("hidden_size", c.hidden_size);
  row("num_hidden_layers", c.num_hidden_layers);
  row("num_heads / num_kv_heads / head_dim",
      fmt::format("{} / {} / {}", c.num_heads, c.num_kv_heads, c.head_dim));
  row("full attention layers",
      fmt::format("{} {}", c.num_full_layers(),
                  layer_list(c, [&](int64_t i) { return !c.is_sliding(i); })));
  row("sliding layers / sliding_window",
      fmt::format("{} / {}", c.num_sliding_layers(), c.sliding_window));
  row("no-rope layers", layer_list(c, [&](int64_t i) { return !c.layer_uses_rope[i]; }));
  row("dense layers (mlp_only_layers)",
      layer_list(c, [&](int64_t i) { return c.layer_is_dense[i]; }));
  row("intermediate_size", c.intermediate_size);
  row("num_experts / num_experts_per_tok",
      fmt::format("{} / {}", c.num_experts, c.num_experts_per_tok));
  row("moe_intermediate_size", c.moe_intermediate_size);
  row("shared_expert_intermediate_size", c.shared_expert_intermediate_size);
  row("norm_topk_prob", c.norm_topk_prob);
  row("routed_scaling_factor", c.routed_scaling_factor);
  row("expert score bias", c.has_expert_bias);
  row("rope_theta", c.rope_theta);
  row("rms_norm_eps", c.rms_norm_eps);
  row("attention_scale", c.attention_scale);
  row("max_position_embeddings", c.max_position_embeddings);
  row("tie_word_embeddings", c.tie_word_embeddings);
  row("bos_token_id", c.bos_token_id ? fmt::format("{}", *c.bos_token_id) : "none");
  row("eos_token_id", fmt::format("[{}]", fmt::join(c.eos_token_ids, ",")));
  row("pad_token_id", c.pad_token_id ? fmt::format("{}", *c.pad_token_id) : "none");
  const auto& g = c.generation;
  auto opt = [](const auto& o) { return o ? fmt::format("{}", *o) : std::string("-"); };
  row("generation defaults",
      fmt::format("temperature {} top_p {} top_k {} eos [{}]", opt(g.temperature), opt(g.top_p),
                  opt(g.top_k), fmt::join(g.eos_token_ids, ",")));
  row("kv cache per token (bf16)", fmt::format("{} bytes", c.kv_bytes_per_token(2)));
}

void print_tensors(const std::vector<TensorRow>& rows) {
  size_t w = 4;
  for (const auto& r : rows) w = std::max(w, r.name.size());
  uint64_t total = 0;
  fmt::print("tensors: {}\n", rows.size());
  fmt::print("  {:<{}}  {:<6}  {:<20}  {:>14}\n", "name", w, "dtype", "shape", "bytes");
  for (const auto& r : rows) {
    fmt::print("  {:<{}}  {:<6}  {:<20}  {:>14}\n", r.name, w, r.dtype, r.shape, r.bytes);
    total += r.bytes;
  }
  fmt::print("  total bytes: {} ({:.2f} GB)\n", total, static_cast<double>(total) / 1e9);
}

std::string shape_of(const std::vector<int64_t>& s) {
  return fmt::format("[{}]", fmt::join(s, ","));
}

Result<int> inspect(const std::string& path, const std::string& hf_config_path) {
  bool is_dir = false, is_json = false, exists = false;
  try {
    exists = std::filesystem::exists(path);
    is_dir = std::filesystem::is_directory(path);
    is_json = std::filesystem::path(path).extension() == ".json";
  } catch (const std::filesystem::filesystem_error& e) {
    return make_error(ErrorCode::kIo, "{}: {}", path, e.what());
  }
  if (!exists) return make_error(ErrorCode::kNotFound, "{}: no such file or directory", path);

  std::optional<model::FlintConfig> override_cfg;
  if (!hf_config_path.empty()) {
    FLINT_ASSIGN_OR_RETURN(override_cfg, model::FlintConfig::from_hf_path(hf_config_path));
  }

  std::vector<TensorRow> rows;
  model::FlintConfig cfg;
  std::string form;
  bool has_weights = false;
  if (is_dir || is_json) {
    FLINT_ASSIGN_OR_RETURN(cfg, model::FlintConfig::from_hf_path(path));
    if (override_cfg) cfg = *override_cfg;
    std::string dir = is_dir ? path : std::filesystem::path(path).parent_path().string();
    if (dir.empty()) dir = ".";
    bool any_st = false;
    try {
      for (const auto& e : std::filesystem::directory_iterator(dir)) {
        any_st |= e.path().extension() == ".safetensors";
      }
    } catch (const std::filesystem::filesystem_error& e) {
      return make_error(ErrorCode::kIo, "{}: {}", dir, e.what());
    }
    form = "hf config.json";
    if (any_st) {
      FLINT_ASSIGN_OR_RETURN(auto st, formats::SafetensorsModel::open(dir));
      for (const auto& [name, t] : st.tensors()) {
        rows.push_back({name, std::string(dtype_name(t.dtype)), shape_of(t.shape), t.nbytes});
      }
      form = "hf safetensors";
      has_weights = true;
    }
  } else {
    FLINT_ASSIGN_OR_RETURN(auto g, formats::GgufFile::open(path));
    if (override_cfg) {
      cfg = *override_cfg;
    } else {
      auto c = model::FlintConfig::from_gguf(g);
      if (!c) return c.error().with_context("{}", path);
      cfg = std::move(*c);
    }
    for (const auto& t : g.tensors()) {
      rows.push_back(
          {t.name, std::string(dtype_name(t.dtype)), shape_of(t.torch_shape()), t.nbytes});
    }
    form = fmt::format("gguf v{}", g.version());
    has_weights = true;
  }

  std::optional<model::FlintWeights> weights;
  if (has_weights) {
    auto w = model::FlintWeights::load(path, override_cfg ? &*override_cfg : nullptr);
    if (!w) return w.error();
    cfg = w->config;  // has_expert_bias is known after binding
    weights = std::move(*w);
  }

  fmt::print("path: {}\nformat: {}\n", path, form);
  print_config(cfg);
  if (has_weights) print_tensors(rows);
  const double total = static_cast<double>(cfg.total_params());
  const double active = static_cast<double>(cfg.active_params());
  fmt::print("parameters (from the config):\n");
  fmt::print("  total:  {} ({})\n", cfg.total_params(), human(total));
  fmt::print("  active: {} ({}) per token\n", cfg.active_params(), human(active));
  if (has_weights) fmt::print("check: all {} tensors bound\n", rows.size());
  return 0;
}

}  // namespace

void add_inspect_command(CLI::App& app, int& exit_code) {
  auto* cmd =
      app.add_subcommand("inspect", "Print a checkpoint's config, tensors and parameter counts");
  auto path = std::make_shared<std::string>();
  auto hf_config = std::make_shared<std::string>();
  cmd->add_option("path", *path, "HF directory, config.json or .gguf file")->required();
  cmd->add_option("--hf-config-path", *hf_config,
                  "config.json (or its directory) that replaces the checkpoint's own config");
  cmd->callback([path, hf_config, &exit_code] {
    auto local = resolve_model_arg(*path, ArgKind::kModel);
    auto config = hf_config->empty() ? Result<std::string>(std::string())
                                     : resolve_model_arg(*hf_config, ArgKind::kConfig);
    auto r = !local    ? Result<int>(local.error())
             : !config ? Result<int>(config.error())
                       : inspect(*local, *config);
    if (!r) {
      spdlog::error("inspect: {}", r.error().message);
      exit_code = 1;
      return;
    }
    exit_code = *r;
  });
}

}  // namespace flint::cli
