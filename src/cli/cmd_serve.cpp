// `flint serve [MODEL]`: the OpenAI-compatible server with vLLM's flag names. The HTTP port opens
// first (GET /health answers 503 "Loading model"), then the tokenizer, chat template, weights and
// engine load, on the CPU or on the GPU (--device; its KV cache sized from
// --gpu-memory-utilization by backends/cuda/memory_plan; --load-format dummy weights generated on
// the GPU itself). Test: tests/python/server/.
// Needs the server layer (absent on the GPU image): empty without it.
#ifdef FLINT_HAVE_SERVER
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "backends/cpu/forward.h"
#include "cli/commands.h"
#include "cli/model_args.h"
#include "engine/engine.h"
#include "formats/gguf.h"
#include "model/config.h"
#include "model/weights.h"
#include "server/http_server.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

#ifdef FLINT_HAVE_CUDA
#include "backends/cuda/memory_plan.h"
#endif

namespace flint::cli {
namespace {

namespace fs = std::filesystem;

struct ServeArgs {
  std::string model;
  std::string host = "0.0.0.0";
  int port = 8000;
  std::vector<std::string> served_model_names;
  std::string tokenizer;
  std::string hf_config_path;
  std::string max_model_len;
  int max_num_seqs = 256;
  int max_num_batched_tokens = 0;  // 0: engine::default_max_num_batched_tokens for the device
  double gpu_memory_utilization = 0.9;
  std::string kv_cache_memory;  // empty: 1G on the CPU, from --gpu-memory-utilization on the GPU
  std::string device = "auto";
  std::string load_format = "auto";
  std::string dtype = "auto";
  std::string quantization;  // empty: none
  uint64_t seed = 0;
  std::vector<std::string> api_keys;
  std::string chat_template;
  std::string default_chat_template_kwargs;
  bool enable_auto_tool_choice = false;
  std::string tool_call_parser;
  std::string reasoning_parser;
  bool exclude_tools_when_tool_choice_none = false;
  bool enable_prefix_caching = true;
  bool no_enable_prefix_caching = false;
  bool async_scheduling = true;
  bool no_async_scheduling = false;
  std::string generation_config = "auto";
  int max_num_waiting = 0;
  int threads = 0;
  std::string max_request_body = "32M";
};

// vLLM's human-readable integers: 1k = 1000, 1K = 1024 (also m/M, g/G, t/T).
Result<int64_t> parse_human_int(const std::string& flag, const std::string& text) {
  if (text.empty()) return make_error(ErrorCode::kInvalidArgument, "{}: empty value", flag);
  size_t pos = 0;
  double value = 0.0;
  try {
    value = std::stod(text, &pos);
  } catch (...) {
    return make_error(ErrorCode::kInvalidArgument, "{}: '{}' is not a number", flag, text);
  }
  std::string suffix = text.substr(pos);
  double mult = 1.0;
  if (suffix.size() == 1) {
    const char c = suffix[0];
    const double base = std::islower(static_cast<unsigned char>(c)) ? 1000.0 : 1024.0;
    const int power = std::string("kmgt").find(static_cast<char>(std::tolower(c))) + 1;
    if (power == 0) {
      return make_error(ErrorCode::kInvalidArgument, "{}: unknown suffix '{}' in '{}'", flag,
                        suffix, text);
    }
    mult = std::pow(base, power);
  } else if (!suffix.empty()) {
    return make_error(ErrorCode::kInvalidArgument, "{}: '{}' is not a number", flag, text);
  }
  const double v = value * mult;
  if (!std::isfinite(v) || v <= 0 || v > 9e18) {
    return make_error(ErrorCode::kInvalidArgument, "{}: '{}' must be positive", flag, text);
  }
  return static_cast<int64_t>(v);
}

#ifdef FLINT_HAVE_CUDA
// The GPU memory plan's description, a log line each.
std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find('\n', start), text.size());
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}
#endif

// MODEL defaults to the bundled tiny model: under the working directory, or in the source tree
// above the binary (build-*/src/cli/flint).
std::string default_model() {
  std::error_code ec;
  const fs::path rel = "models/flint-nano";
  if (fs::exists(rel / "config.json", ec)) return rel.string();
  fs::path dir = fs::read_symlink("/proc/self/exe", ec).parent_path();
  for (int up = 0; !ec && up < 6 && !dir.empty(); ++up, dir = dir.parent_path()) {
    if (fs::exists(dir / rel / "config.json", ec)) return (dir / rel).string();
    if (dir == dir.parent_path()) break;
  }
  return rel.string();
}

Result<tokenizer::Tokenizer> load_tokenizer(const std::string& path, const std::string& model) {
  std::error_code ec;
  const std::string src = path.empty() ? model : path;
  if (src.ends_with(".gguf")) {
    FLINT_ASSIGN_OR_RETURN(auto gguf, formats::GgufFile::open(src));
    return tokenizer::Tokenizer::from_gguf(gguf);
  }
  const std::string file =
      fs::is_directory(src, ec) ? (fs::path(src) / "tokenizer.json").string() : src;
  return tokenizer::Tokenizer::from_json_file(file);
}

// --load-format dummy: the model's config (or --hf-config-path), for random weights as vLLM makes
// for benchmarks; the checkpoint's weight files are not read.
Result<model::FlintConfig> dummy_config(const ServeArgs& a,
                                        const std::optional<model::FlintConfig>& override_cfg) {
  if (override_cfg) return *override_cfg;
  if (a.model.ends_with(".gguf")) {
    FLINT_ASSIGN_OR_RETURN(auto gguf, formats::GgufFile::open(a.model));
    return model::FlintConfig::from_gguf(gguf);
  }
  return model::FlintConfig::from_hf_path(a.model);
}

bool wants_nvfp4(const ServeArgs& a) { return !a.quantization.empty(); }

// MODEL, --tokenizer and --hf-config-path may be HF repo ids: resolved to local paths through the
// shared HF cache (downloading what is missing unless HF_HUB_OFFLINE=1). --load-format dummy reads
// no weight files, so a repo id MODEL supplies only its config and tokenizer files.
Status resolve_args(ServeArgs& a) {
  std::error_code ec;
  if (a.load_format != "dummy" || fs::exists(a.model, ec)) {
    return resolve_model_args(a.model, a.tokenizer, a.hf_config_path);
  }
  FLINT_ASSIGN_OR_RETURN(a.tokenizer, resolve_model_arg(a.tokenizer.empty() ? a.model : a.tokenizer,
                                                        ArgKind::kTokenizer));
  FLINT_ASSIGN_OR_RETURN(
      a.hf_config_path,
      resolve_model_arg(a.hf_config_path.empty() ? a.model : a.hf_config_path, ArgKind::kConfig));
  return ok();
}

// --quantization names what a checkpoint holds (vLLM checks it against the checkpoint too); its
// weights are served in their stored types either way.
Status check_quantization(const ServeArgs& a, const model::FlintWeights& w) {
  if (!wants_nvfp4(a) || w.layers.empty()) return ok();
  const DType stored = w.layers[0].q.w.dtype();
  if (stored == DType::kNVFP4) return ok();
  return make_error(
      ErrorCode::kInvalidArgument,
      "serve: --quantization {} but {} stores {} linear weights (leave --quantization "
      "out: a checkpoint is served in its stored types)",
      a.quantization, a.model, stored);
}

// The CPU backend: an f32 KV cache of --kv-cache-memory bytes (default 1G).
Result<std::unique_ptr<model::Backend>> cpu_backend(const ServeArgs& a,
                                                    const model::FlintWeights& weights,
                                                    engine::EngineConfig& ec) {
  FLINT_ASSIGN_OR_RETURN(
      ec.kv_cache_memory,
      parse_human_int("--kv-cache-memory", a.kv_cache_memory.empty() ? "1G" : a.kv_cache_memory));
  ec.kv_dtype = DType::kF32;
  return std::unique_ptr<model::Backend>(std::make_unique<cpu::CpuBackend>(weights, a.threads));
}

// The CUDA backend: weights uploaded (or, with no host weights, --load-format dummy's generated on
// the GPU: BF16, or NVFP4 with --quantization), one profiling step of --max-num-batched-tokens run,
// and the bf16 KV cache sized from what is left (vLLM's rule) unless --kv-cache-memory says
// otherwise.
Result<std::unique_ptr<model::Backend>> gpu_backend(const ServeArgs& a,
                                                    const model::FlintConfig& cfg,
                                                    const model::FlintWeights* weights,
                                                    engine::EngineConfig& ec) {
#ifdef FLINT_HAVE_CUDA
  cuda::GpuMemoryRequest req;
  req.gpu_memory_utilization = a.gpu_memory_utilization;
  if (!a.kv_cache_memory.empty()) {
    FLINT_ASSIGN_OR_RETURN(req.kv_cache_memory,
                           parse_human_int("--kv-cache-memory", a.kv_cache_memory));
  }
  req.max_model_len = ec.max_model_len > 0 ? ec.max_model_len : cfg.max_position_embeddings;
  req.max_num_seqs = ec.max_num_seqs;
  if (req.max_model_len <= 1) {
    return make_error(ErrorCode::kInvalidArgument,
                      "the model has no max_position_embeddings: give --max-model-len");
  }
  // The same rings the engine allocates: one per sequence, plus prefix-cache snapshots.
  bool has_sliding = false;
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) has_sliding |= cfg.is_sliding(l);
  ec.num_ring_snapshots = std::max(4, ec.max_num_seqs / 2);
  const int64_t num_rings =
      ec.max_num_seqs + (has_sliding && ec.enable_prefix_caching ? ec.num_ring_snapshots : 0);
  ec.kv_dtype = DType::kBF16;
  cuda::ProfileShape shape;
  shape.num_tokens = ec.max_num_batched_tokens;
  shape.num_seqs = ec.max_num_seqs;
  shape.max_model_len = static_cast<int>(std::min<int64_t>(req.max_model_len, INT32_MAX));
  shape.page_size = ec.page_size;
  cuda::GpuMemoryFacts facts;
  const auto t0 = std::chrono::steady_clock::now();
  const DType dummy_dtype = wants_nvfp4(a) ? DType::kNVFP4 : DType::kBF16;
  FLINT_ASSIGN_OR_RETURN(auto backend, weights != nullptr
                                           ? cuda::create_profiled_backend(*weights, shape, &facts)
                                           : cuda::create_profiled_dummy_backend(
                                                 cfg, dummy_dtype, a.seed, shape, &facts));
  spdlog::info("gpu: {} and a {}-token profiling step run in {:.2f}s",
               weights != nullptr
                   ? std::string("weights uploaded")
                   : fmt::format("dummy {} weights generated on the GPU", dummy_dtype),
               shape.num_tokens,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  FLINT_ASSIGN_OR_RETURN(
      cuda::GpuMemoryPlan plan,
      cuda::plan_gpu_memory(facts, cuda::kv_layout(cfg, ec.page_size, num_rings, ec.kv_dtype),
                            req));
  for (const auto& line : split_lines(cuda::describe(facts, plan, req))) spdlog::info("{}", line);
  ec.kv_cache_memory = plan.kv_cache_bytes;
  return std::unique_ptr<model::Backend>(std::move(backend));
#else
  (void)a, (void)cfg, (void)weights, (void)ec;
  return make_error(ErrorCode::kUnsupported, "this flint was built without CUDA");
#endif
}

// Everything the server needs, loaded after the port is open.
struct Loaded {
  std::optional<model::FlintWeights> weights;
  std::optional<tokenizer::Tokenizer> tok;
  std::unique_ptr<engine::Engine> engine;
  server::ServingModel serving;
};

Status load(const ServeArgs& args, Loaded& out) {
  ServeArgs a = args;
  FLINT_ASSIGN_OR_RETURN(Device device, resolve_device(a.device));
  const bool dummy = a.load_format == "dummy";
  if (dummy && wants_nvfp4(a) && device == Device::kCpu) {
    return make_error(ErrorCode::kUnsupported,
                      "serve: --load-format dummy with --quantization {} needs --device cuda (the "
                      "CPU backend's dummy weights are bf16)",
                      a.quantization);
  }
  FLINT_TRY(resolve_args(a));
  FLINT_ASSIGN_OR_RETURN(std::optional<model::FlintConfig> override_cfg,
                         load_config_override("serve", a.hf_config_path));
  auto tok = load_tokenizer(a.tokenizer, a.model);
  if (!tok) return tok.error().with_context("serve: tokenizer");
  out.tok.emplace(std::move(*tok));
  auto source = tokenizer::load_chat_template_source(a.tokenizer.empty() ? a.model : a.tokenizer,
                                                     a.chat_template);
  if (source) {
    auto tmpl = tokenizer::ChatTemplate::parse(std::move(*source));
    if (!tmpl) return tmpl.error().with_context("serve: chat template");
    out.serving.chat_template.emplace(std::move(*tmpl));
  } else if (source.error().code != ErrorCode::kNotFound || !a.chat_template.empty()) {
    return source.error().with_context("serve: --chat-template");
  } else {
    spdlog::warn("serve: the model has no chat template; /v1/chat/completions will fail");
  }
  // The config, and the host weights unless dummy ones are made below.
  model::FlintConfig cfg;
  if (dummy) {
    auto c = dummy_config(a, override_cfg);
    if (!c) return c.error().with_context("serve: --load-format dummy: the config of {}", a.model);
    cfg = std::move(*c);
  } else {
    auto weights = model::FlintWeights::load(a.model, override_cfg ? &*override_cfg : nullptr);
    if (!weights) return weights.error().with_context("serve: loading {}", a.model);
    FLINT_TRY(check_quantization(a, *weights));
    cfg = weights->config;
    out.weights.emplace(std::move(*weights));
  }
  if (a.generation_config == "vllm") cfg.generation = model::GenerationDefaults{};
  if (out.tok->vocab_size() > cfg.vocab_size) {
    return make_error(ErrorCode::kInvalidArgument,
                      "serve: the tokenizer has {} tokens but the model's vocab_size is {}",
                      out.tok->vocab_size(), cfg.vocab_size);
  }

  engine::EngineConfig ec;
  ec.max_num_seqs = a.max_num_seqs;
  ec.max_num_batched_tokens = a.max_num_batched_tokens;
  if (ec.max_num_batched_tokens == 0) {  // vLLM's default for the device
    uint64_t gpu_total = 0;
    std::string gpu_name;
#ifdef FLINT_HAVE_CUDA
    if (device == Device::kCuda) {
      FLINT_ASSIGN_OR_RETURN(cuda::GpuInfo gpu, cuda::gpu_info());
      gpu_total = static_cast<uint64_t>(gpu.total);
      gpu_name = gpu.name;
    }
#endif
    ec.max_num_batched_tokens =
        engine::default_max_num_batched_tokens(device == Device::kCuda, gpu_total, gpu_name);
    spdlog::info("serve: --max-num-batched-tokens {} (vLLM's default on {})",
                 ec.max_num_batched_tokens,
                 device == Device::kCpu ? std::string("the CPU") : gpu_name);
  }
  if (!a.max_model_len.empty()) {
    FLINT_ASSIGN_OR_RETURN(int64_t len, parse_human_int("--max-model-len", a.max_model_len));
    ec.max_model_len = static_cast<int>(std::min<int64_t>(len, INT32_MAX));
  }
  ec.enable_prefix_caching = a.enable_prefix_caching && !a.no_enable_prefix_caching;
  ec.async_scheduling = a.async_scheduling && !a.no_async_scheduling;
  ec.seed = a.seed;
  ec.max_num_waiting = a.max_num_waiting;
  ec.extra_eos_token_ids = cfg.generation.eos_token_ids;
  if (auto e = out.tok->eos_id()) ec.extra_eos_token_ids.push_back(*e);
  // --load-format dummy: random BF16 weights of the config on the host for the CPU backend; the
  // CUDA backend generates its own on the GPU (no host copy: 80 GB at Flint's full size).
  if (dummy && device == Device::kCpu) {
    auto weights = model::FlintWeights::dummy(cfg, DType::kBF16, a.seed);
    if (!weights) return weights.error().with_context("serve: --load-format dummy");
    out.weights.emplace(std::move(*weights));
  }
  // The backends take the config (and the generation defaults the engine reads) from the weights.
  if (out.weights) out.weights->config.generation = cfg.generation;
  auto backend = device == Device::kCuda
                     ? gpu_backend(a, cfg, out.weights ? &*out.weights : nullptr, ec)
                     : cpu_backend(a, *out.weights, ec);
  if (!backend) return backend.error().with_context("serve");
  auto decoder = std::make_shared<server::TokenizerDecoder>(*out.tok);
  auto eng = engine::Engine::create(ec, std::move(*backend), decoder);
  if (!eng && eng.error().code == ErrorCode::kOutOfMemory && device == Device::kCpu) {
    return eng.error().with_context(
        "serve: engine (raise --kv-cache-memory or lower --max-model-len / --max-num-seqs)");
  }
  if (!eng) return eng.error().with_context("serve: engine");
  out.engine = std::move(*eng);
  out.engine->start();
  out.serving.engine = out.engine.get();
  out.serving.tokenizer = &*out.tok;
  if (auto b = out.tok->bos_id()) out.serving.bos_token = out.tok->id_to_token(*b);
  if (auto e = out.tok->eos_id()) out.serving.eos_token = out.tok->id_to_token(*e);
  return ok();
}

Result<server::ServerConfig> server_config(const ServeArgs& a) {
  server::ServerConfig sc;
  sc.host = a.host;
  sc.port = a.port;
  sc.model_path = a.model;
  sc.served_model_names = a.served_model_names;
  if (sc.served_model_names.empty()) sc.served_model_names.push_back(a.model);
  sc.api_keys = a.api_keys;
  if (sc.api_keys.empty()) {
    if (const char* k = std::getenv("VLLM_API_KEY"); k && *k) sc.api_keys.push_back(k);
  }
  FLINT_ASSIGN_OR_RETURN(int64_t body, parse_human_int("--max-request-body", a.max_request_body));
  sc.max_body_bytes = static_cast<size_t>(body);
  sc.num_http_threads = std::max(64, a.max_num_seqs + 32);
  for (const auto& [flag, value] : {std::pair{"--tool-call-parser", a.tool_call_parser},
                                    std::pair{"--reasoning-parser", a.reasoning_parser}}) {
    if (!value.empty() && value != "glm47" && value != "glm45") {
      return make_error(ErrorCode::kInvalidArgument, "serve: {} '{}' is not supported (use glm47)",
                        flag, value);
    }
  }
  if (a.enable_auto_tool_choice && a.tool_call_parser.empty()) {
    return make_error(ErrorCode::kInvalidArgument,
                      "serve: --enable-auto-tool-choice requires --tool-call-parser");
  }
  sc.enable_auto_tool_choice = a.enable_auto_tool_choice;
  sc.tool_call_parser = a.tool_call_parser;
  sc.reasoning_parser = a.reasoning_parser;
  sc.exclude_tools_when_tool_choice_none = a.exclude_tools_when_tool_choice_none;
  if (!a.default_chat_template_kwargs.empty()) {
    auto j = nlohmann::ordered_json::parse(a.default_chat_template_kwargs, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      return make_error(ErrorCode::kInvalidArgument,
                        "serve: --default-chat-template-kwargs must be a JSON object, got '{}'",
                        a.default_chat_template_kwargs);
    }
    sc.default_chat_template_kwargs = j;
  }
  if (a.load_format != "auto" && a.load_format != "dummy") {
    return make_error(ErrorCode::kInvalidArgument,
                      "serve: --load-format must be auto or dummy, got '{}'", a.load_format);
  }
  if (a.dtype != "auto" && a.dtype != "bfloat16") {
    return make_error(ErrorCode::kInvalidArgument,
                      "serve: --dtype must be auto or bfloat16 (flint has no float16 or float32 "
                      "weights path), got '{}'",
                      a.dtype);
  }
  if (!a.quantization.empty() && a.quantization != "nvfp4" && a.quantization != "modelopt_fp4") {
    return make_error(ErrorCode::kInvalidArgument,
                      "serve: --quantization must be nvfp4 (or vLLM's name for it, modelopt_fp4), "
                      "got '{}'",
                      a.quantization);
  }
  if (!(a.gpu_memory_utilization > 0.0 && a.gpu_memory_utilization <= 1.0)) {
    return make_error(ErrorCode::kInvalidArgument,
                      "serve: --gpu-memory-utilization must be in (0, 1], got {}",
                      a.gpu_memory_utilization);
  }
  if (a.generation_config != "auto" && a.generation_config != "vllm") {
    return make_error(ErrorCode::kInvalidArgument,
                      "serve: --generation-config must be auto or vllm, got '{}'",
                      a.generation_config);
  }
  return sc;
}

// Shuts the server down on SIGINT/SIGTERM: a waiting thread turns the signal into stop().
std::atomic<bool> g_stop{false};
extern "C" void on_signal(int) { g_stop.store(true); }

int serve(ServeArgs a) {
  if (a.model.empty()) {  // the bundled model answers to its own name, not to a path
    a.model = default_model();
    if (a.served_model_names.empty()) a.served_model_names.push_back("flint-nano");
  }
  auto sc = server_config(a);
  if (!sc) {
    spdlog::error("{}", sc.error().message);
    return 1;
  }
  std::signal(SIGPIPE, SIG_IGN);  // a client that went away must not kill the server
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  server::HttpServer http(*sc);
  if (auto st = http.start(); !st) {
    spdlog::error("{}", st.error().message);
    return 1;
  }
  std::thread watcher([&http] {
    while (!g_stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    http.stop();
  });
  Loaded loaded;
  const auto t0 = std::chrono::steady_clock::now();
  if (auto st = load(a, loaded); !st) {
    spdlog::error("{}", st.error().message);
    g_stop.store(true);
    watcher.join();
    http.wait();
    return 1;
  }
  spdlog::info("model {} ready in {:.2f}s (max_model_len {}); serving as {}", a.model,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
               loaded.engine->config().max_model_len, sc->served_model_names.front());
  http.set_ready(&loaded.serving);
  http.wait();
  g_stop.store(true);
  watcher.join();
  loaded.engine->stop();
  spdlog::info("server stopped");
  return 0;
}

}  // namespace

void add_serve_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("serve", "OpenAI-compatible server (vLLM's flags)");
  auto a = std::make_shared<ServeArgs>();
  // One option with both names: newer CLI11 (2.4, the GPU image's) rejects a positional "model"
  // beside a separate "--model" as the same name added twice.
  cmd->add_option("model,--model", a->model,
                  "HF directory or .gguf file, positional or --model (default: the bundled "
                  "models/flint-nano)");
  cmd->add_option("--host", a->host, "address to listen on");
  cmd->add_option("--port", a->port, "port (0: any free port)")->check(CLI::Range(0, 65535));
  cmd->add_option("--served-model-name", a->served_model_names,
                  "names the API accepts (first is echoed)");
  cmd->add_option("--tokenizer", a->tokenizer, "tokenizer.json, its directory, or a .gguf");
  cmd->add_option("--hf-config-path", a->hf_config_path, "config.json (or its directory) to use");
  cmd->add_option("--max-model-len", a->max_model_len,
                  "prompt + output tokens (accepts 32k / 32K)");
  cmd->add_option("--max-num-seqs", a->max_num_seqs, "sequences per step")
      ->check(CLI::Range(1, 65536));
  cmd->add_option("--max-num-batched-tokens", a->max_num_batched_tokens,
                  "tokens per step (default, as vLLM's: 8192 on a GPU of at least 70 GiB other "
                  "than an A100, else 2048)")
      ->check(CLI::Range(1, 1 << 24));
  cmd->add_option("--device", a->device,
                  "auto (CUDA when built with it and a GPU is visible), cuda or cpu")
      ->check(CLI::IsMember({"auto", "cuda", "cpu"}));
  cmd->add_option("--gpu-memory-utilization", a->gpu_memory_utilization,
                  "GPU memory fraction for weights, activations and KV cache (GPU only)");
  cmd->add_option("--kv-cache-memory", a->kv_cache_memory,
                  "KV cache bytes (e.g. 512M, 2G); CPU default 1G, GPU default: what "
                  "--gpu-memory-utilization leaves");
  cmd->add_option("--load-format", a->load_format,
                  "auto (read the checkpoint) or dummy (random weights of its config; on the GPU "
                  "generated there)");
  cmd->add_option("--dtype", a->dtype,
                  "auto or bfloat16 (dummy weights are bf16; a checkpoint keeps its stored types)");
  cmd->add_option("--quantization,-q", a->quantization,
                  "nvfp4 (or modelopt_fp4): NVFP4 dummy weights on the GPU; with a checkpoint, "
                  "checks that it is NVFP4");
  cmd->add_option("--seed", a->seed, "seed for requests that set none, and for dummy weights");
  cmd->add_option("--api-key", a->api_keys, "accepted API keys (also VLLM_API_KEY)");
  cmd->add_option("--chat-template", a->chat_template, "template file or inline Jinja");
  cmd->add_option("--default-chat-template-kwargs", a->default_chat_template_kwargs,
                  "JSON object merged under each request's chat_template_kwargs");
  cmd->add_flag("--enable-auto-tool-choice", a->enable_auto_tool_choice, "allow tool_choice auto");
  cmd->add_option("--tool-call-parser", a->tool_call_parser, "glm47");
  cmd->add_option("--reasoning-parser", a->reasoning_parser, "glm47");
  cmd->add_flag("--exclude-tools-when-tool-choice-none", a->exclude_tools_when_tool_choice_none,
                "leave tools out of the prompt when tool_choice is none");
  cmd->add_flag("--enable-prefix-caching", a->enable_prefix_caching,
                "reuse shared prompt prefixes (default)");
  cmd->add_flag("--no-enable-prefix-caching", a->no_enable_prefix_caching,
                "turn prefix caching off");
  cmd->add_flag("--async-scheduling", a->async_scheduling,
                "queue the next decode step before reading this one's tokens (default; GPU)");
  cmd->add_flag("--no-async-scheduling", a->no_async_scheduling,
                "wait for each step's tokens before queuing the next");
  cmd->add_option("--generation-config", a->generation_config,
                  "auto (use generation_config.json defaults) or vllm (ignore them)");
  cmd->add_option("--max-num-waiting", a->max_num_waiting,
                  "queued requests before 503 (0: unlimited)")
      ->check(CLI::Range(0, 1 << 30));
  cmd->add_option("--threads", a->threads, "CPU backend threads (0: all cores; unused on the GPU)");
  cmd->add_option("--max-request-body", a->max_request_body, "largest request body (e.g. 32M)");
  cmd->callback([a, &exit_code] { exit_code = serve(*a); });
}

}  // namespace flint::cli
#endif  // FLINT_HAVE_SERVER
