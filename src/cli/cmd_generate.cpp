// `flint generate MODEL`: one prompt through the CPU or CUDA backend (--device), text streamed to
// stdout, prompt and decode speed to stderr. Test: tests/python/cpu/test_generate.py.
// Needs the tokenizer and engine layers (absent on the GPU image): empty without them.
#ifdef FLINT_HAVE_TOKENIZER
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "backends/cpu/forward.h"
#include "cli/commands.h"
#include "cli/model_args.h"
#include "engine/logits_processor.h"
#include "engine/request.h"
#include "formats/gguf.h"
#include "model/config.h"
#include "model/weights.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

#ifdef FLINT_HAVE_CUDA
#include "backends/cuda/cuda_backend.h"
#endif

namespace flint::cli {
namespace {

struct GenerateArgs {
  std::string model;
  std::string hf_config_path;
  std::string tokenizer_path;
  std::optional<std::string> prompt;
  std::optional<std::string> chat;
  std::vector<int32_t> prompt_ids;
  std::optional<float> temperature, top_p, min_p;
  std::optional<int> top_k;
  uint64_t seed = 0;
  int max_tokens = 64;
  int threads = 0;
  std::string kv_dtype = "auto";
  std::string device = "auto";
  std::string dump_logits;
  bool ignore_eos = false;
};

Result<tokenizer::Tokenizer> load_tokenizer(const GenerateArgs& a, bool is_gguf) {
  namespace fs = std::filesystem;
  if (!a.tokenizer_path.empty()) {
    std::error_code ec;
    const std::string p = fs::is_directory(a.tokenizer_path, ec)
                              ? (fs::path(a.tokenizer_path) / "tokenizer.json").string()
                              : a.tokenizer_path;
    return tokenizer::Tokenizer::from_json_file(p);
  }
  if (is_gguf) {
    FLINT_ASSIGN_OR_RETURN(auto gguf, formats::GgufFile::open(a.model));
    return tokenizer::Tokenizer::from_gguf(gguf);
  }
  return tokenizer::Tokenizer::from_json_file((fs::path(a.model) / "tokenizer.json").string());
}

Result<std::vector<int32_t>> prompt_tokens(const GenerateArgs& a, const tokenizer::Tokenizer& tok) {
  const int given = a.prompt.has_value() + a.chat.has_value() + !a.prompt_ids.empty();
  if (given != 1)
    return make_error(ErrorCode::kInvalidArgument,
                      "generate: give exactly one of --prompt, --chat or --prompt-ids");
  if (!a.prompt_ids.empty()) return a.prompt_ids;
  if (a.prompt) return tok.encode(*a.prompt, /*add_special_tokens=*/true);
  FLINT_ASSIGN_OR_RETURN(std::string source, tokenizer::load_chat_template_source(a.model));
  FLINT_ASSIGN_OR_RETURN(auto tmpl, tokenizer::ChatTemplate::parse(std::move(source)));
  nlohmann::ordered_json ctx;
  ctx["messages"] = nlohmann::ordered_json::array({{{"role", "user"}, {"content", *a.chat}}});
  ctx["add_generation_prompt"] = true;
  FLINT_ASSIGN_OR_RETURN(std::string text, tmpl.render(ctx));
  return tok.encode(text, /*add_special_tokens=*/false);
}

Result<std::unique_ptr<model::Backend>> make_backend(Device device,
                                                     const model::FlintWeights& weights,
                                                     int threads) {
  if (device == Device::kCpu) {
    return std::unique_ptr<model::Backend>(std::make_unique<cpu::CpuBackend>(weights, threads));
  }
#ifdef FLINT_HAVE_CUDA
  auto b = cuda::CudaBackend::create(weights);
  if (!b) return b.error().with_context("generate: cuda backend");
  return std::unique_ptr<model::Backend>(std::move(*b));
#else
  return make_error(ErrorCode::kUnsupported, "generate: this flint was built without CUDA");
#endif
}

Status generate(const GenerateArgs& args) {
  using Clock = std::chrono::steady_clock;
  // MODEL, --tokenizer and --hf-config-path may be HF repo ids: resolve them to local paths.
  GenerateArgs a = args;
  FLINT_TRY(resolve_model_args(a.model, a.tokenizer_path, a.hf_config_path));
  FLINT_ASSIGN_OR_RETURN(std::optional<model::FlintConfig> override_cfg,
                         load_config_override("generate", a.hf_config_path));
  auto weights = model::FlintWeights::load(a.model, override_cfg ? &*override_cfg : nullptr);
  if (!weights) return weights.error().with_context("generate: loading {}", a.model);
  const model::FlintConfig& cfg = weights->config;
  const bool is_gguf = a.model.ends_with(".gguf");
  auto tok = load_tokenizer(a, is_gguf);
  if (!tok) return tok.error().with_context("generate: tokenizer");
  FLINT_ASSIGN_OR_RETURN(std::vector<int32_t> prompt, prompt_tokens(a, *tok));

  if (prompt.empty())
    return make_error(ErrorCode::kInvalidArgument, "generate: the prompt is empty");
  for (int32_t id : prompt)
    if (id < 0 || id >= cfg.vocab_size)
      return make_error(ErrorCode::kInvalidArgument,
                        "generate: prompt token id {} is outside the vocabulary [0, {})", id,
                        cfg.vocab_size);
  const int64_t max_len = cfg.max_position_embeddings;
  if (max_len > 0 && std::ssize(prompt) >= max_len)
    return make_error(ErrorCode::kInvalidArgument,
                      "generate: the prompt has {} tokens, the model's maximum length is {}",
                      prompt.size(), max_len);
  if (a.max_tokens < 1)
    return make_error(ErrorCode::kInvalidArgument, "generate: --max-tokens must be >= 1, got {}",
                      a.max_tokens);
  int64_t max_tokens = a.max_tokens;
  if (max_len > 0) max_tokens = std::min<int64_t>(max_tokens, max_len - std::ssize(prompt));

  engine::SamplingParams sp;
  sp.temperature = a.temperature;
  sp.top_p = a.top_p;
  sp.top_k = a.top_k;
  sp.min_p = a.min_p;
  sp.max_tokens = static_cast<int>(max_tokens);
  FLINT_TRY(sp.validate(cfg.vocab_size));
  const engine::ResolvedSampling sampling = engine::resolve_sampling(sp, cfg.generation);
  engine::Rng rng(a.seed);

  std::vector<int32_t> eos = cfg.eos_token_ids;
  eos.insert(eos.end(), cfg.generation.eos_token_ids.begin(), cfg.generation.eos_token_ids.end());
  if (auto e = tok->eos_id()) eos.push_back(*e);

  FLINT_ASSIGN_OR_RETURN(Device device, resolve_device(a.device));
  // auto: exact f32 on the CPU; the CUDA backend keeps bf16 only.
  DType kv = device == Device::kCuda ? DType::kBF16 : DType::kF32;
  if (a.kv_dtype == "bf16") {
    kv = DType::kBF16;
  } else if (a.kv_dtype == "f32" && device == Device::kCuda) {
    return make_error(ErrorCode::kUnsupported,
                      "generate: --kv-dtype f32 is CPU only (the CUDA KV cache is bf16)");
  } else if (a.kv_dtype != "f32" && a.kv_dtype != "auto") {
    return make_error(ErrorCode::kInvalidArgument,
                      "generate: --kv-dtype must be auto, f32 or bf16, got '{}'", a.kv_dtype);
  }
  FLINT_ASSIGN_OR_RETURN(std::unique_ptr<model::Backend> backend,
                         make_backend(device, *weights, a.threads));
  cpu::SimpleSteps steps(1, std::ssize(prompt) + max_tokens);
  FLINT_TRY(backend->init_kv_cache(steps.kv_spec(kv)));

  std::unique_ptr<std::ofstream> dump;
  if (!a.dump_logits.empty()) {
    dump = std::make_unique<std::ofstream>(a.dump_logits, std::ios::binary);
    if (!*dump) return make_error(ErrorCode::kIo, "generate: cannot write {}", a.dump_logits);
  }
  const int64_t V = cfg.vocab_size;
  auto write_dump = [&](const std::vector<float>& l) {
    if (dump)
      dump->write(reinterpret_cast<const char*>(l.data()),
                  static_cast<std::streamsize>(l.size() * 4));
  };

  // Prefill: logits of the last prompt token (of every prompt token with --dump-logits).
  const bool all = dump != nullptr;
  steps.add(0, prompt, all);
  std::vector<float> logits(static_cast<size_t>((all ? std::ssize(prompt) : 1) * V));
  const auto t0 = Clock::now();
  FLINT_TRY(backend->forward(steps.take(), logits));
  const double prefill_s = std::chrono::duration<double>(Clock::now() - t0).count();
  write_dump(logits);
  std::span<const float> last(logits.data() + logits.size() - V, static_cast<size_t>(V));

  tokenizer::StreamingDetokenizer detok(*tok, /*skip_special_tokens=*/true);
  std::vector<float> step_logits(static_cast<size_t>(V));
  int64_t generated = 0;
  std::vector<int32_t> out_ids;
  const auto t1 = Clock::now();
  for (;;) {
    const int32_t id = engine::sample_token(last, sampling, rng);
    ++generated;
    out_ids.push_back(id);
    const bool stop = !a.ignore_eos && std::find(eos.begin(), eos.end(), id) != eos.end();
    if (!stop) {
      std::fputs(detok.add(id).c_str(), stdout);
      std::fflush(stdout);
    }
    if (stop || generated >= max_tokens) break;
    steps.add(0, std::span(&id, 1), true);
    FLINT_TRY(backend->forward(steps.take(), step_logits));
    write_dump(step_logits);
    last = step_logits;
  }
  const double decode_s = std::chrono::duration<double>(Clock::now() - t1).count();
  std::fputs(detok.flush().c_str(), stdout);
  std::fputs("\n", stdout);
  std::fflush(stdout);
  spdlog::info("generated ids: [{}]", fmt::join(out_ids, ","));
  const std::string where =
      device == Device::kCuda
          ? std::string("cuda")
          : fmt::format("{} threads", static_cast<cpu::CpuBackend&>(*backend).num_threads());
  spdlog::info(
      "prompt: {} tokens in {:.3f} s ({:.1f} tokens/s); decode: {} tokens in {:.3f} s "
      "({:.1f} tokens/s); {}",
      prompt.size(), prefill_s, static_cast<double>(prompt.size()) / prefill_s, generated, decode_s,
      generated > 1 ? static_cast<double>(generated - 1) / decode_s : 0.0, where);
  return ok();
}

}  // namespace

void add_generate_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("generate", "Generate text from one prompt (CPU or CUDA backend)");
  auto a = std::make_shared<GenerateArgs>();
  cmd->add_option("model", a->model, "HF directory or .gguf file")->required();
  cmd->add_option("--hf-config-path", a->hf_config_path, "config.json replacing the model's own");
  cmd->add_option("--tokenizer", a->tokenizer_path, "tokenizer.json (or its directory)");
  cmd->add_option("--prompt", a->prompt, "raw prompt text");
  cmd->add_option("--chat", a->chat, "a user message, run through the chat template");
  cmd->add_option("--prompt-ids", a->prompt_ids, "prompt token ids (comma separated)")
      ->delimiter(',');
  cmd->add_option("--temperature", a->temperature,
                  "0: greedy (default: generation_config, else 1)");
  cmd->add_option("--top-p", a->top_p, "nucleus sampling mass");
  cmd->add_option("--top-k", a->top_k, "keep the k most likely tokens (0: off)");
  cmd->add_option("--min-p", a->min_p, "drop tokens below min_p times the top probability");
  cmd->add_option("--seed", a->seed, "sampling seed");
  cmd->add_option("--max-tokens", a->max_tokens, "tokens to generate");
  cmd->add_option("--threads", a->threads, "CPU threads (0: all cores)");
  cmd->add_option("--kv-dtype", a->kv_dtype,
                  "KV cache element type: auto (f32 on the CPU, bf16 on the GPU), f32 or bf16");
  cmd->add_option("--device", a->device,
                  "auto (CUDA when built with it and a GPU is visible), cuda or cpu")
      ->check(CLI::IsMember({"auto", "cuda", "cpu"}));
  cmd->add_option("--dump-logits", a->dump_logits,
                  "write float32 logits [prompt + decode steps, vocab] to this file");
  cmd->add_flag("--ignore-eos", a->ignore_eos, "keep generating after EOS");
  cmd->callback([a, &exit_code] {
    const Status st = generate(*a);
    if (!st) {
      spdlog::error("{}", st.error().message);
      exit_code = 1;
    }
  });
}

}  // namespace flint::cli
#endif  // FLINT_HAVE_TOKENIZER
