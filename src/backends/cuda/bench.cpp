// Decode benchmark behind `flint bench --load-format dummy`. Each configuration captures one
// decode step (forward + greedy argmax) in a CUDA graph and times replays with events; the
// median is reported with the bytes the step must read (weights actually selected by the router,
// plus KV) and the fraction of the read-stream floor measured first.
#include "backends/cuda/bench.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "backends/cuda/forward.h"
#include "backends/cuda/kernels/argmax.h"
#include "backends/cuda/kernels/copy_words.h"
#include "backends/cuda/kernels/ktrace.h"
#include "backends/cuda/kernels/read_stream.h"
#include "backends/cuda/kernels/sampling.h"
#include "backends/cuda/ktrace_report.h"

namespace flint::cuda {
namespace {

float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0f : v[v.size() / 2];
}

// Median GB/s of a read-only stream over 4 GiB (well past the 60 MB L2).
Result<double> measure_read_floor(cudaStream_t s) {
  const int64_t bytes = int64_t(4) << 30;
  FLINT_ASSIGN_OR_RETURN(DeviceBuffer src, DeviceBuffer::allocate(bytes));
  FLINT_ASSIGN_OR_RETURN(DeviceBuffer sink, DeviceBuffer::allocate(read_stream_blocks() * 4));
  FLINT_CUDA_CHECK(cudaMemsetAsync(src.data(), 1, bytes, s));
  cudaEvent_t a, b;
  FLINT_CUDA_CHECK(cudaEventCreate(&a));
  FLINT_CUDA_CHECK(cudaEventCreate(&b));
  std::vector<float> gbs;
  for (int i = 0; i < 13; ++i) {
    FLINT_CUDA_CHECK(cudaEventRecord(a, s));
    read_stream(src.data(), bytes, sink.as<float>(), s);
    FLINT_CUDA_CHECK(cudaEventRecord(b, s));
    FLINT_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    FLINT_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    if (i >= 3) gbs.push_back(static_cast<float>(bytes / (ms * 1e6)));
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return static_cast<double>(median(gbs));
}

struct StepBytes {
  double weights = 0, kv = 0;
};

// Bytes one decode step must read: every dense weight once, the experts the router picked
// (union over the batch), the LM head, and each sequence's visible KV.
StepBytes step_bytes(const DeviceWeights& w, CudaForward& f, int batch, int64_t ctx,
                     bool greedy_head) {
  const model::FlintConfig& c = w.config();
  StepBytes b;
  const int slots = f.slots();
  std::vector<int32_t> ids(int64_t(batch) * slots);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const DeviceLayer& L = w.layers()[l];
    b.weights += L.qkv.matrix_bytes() + L.o.matrix_bytes();
    if (c.layer_is_dense[l]) {
      b.weights += L.gate.matrix_bytes() + L.up.matrix_bytes() + L.down.matrix_bytes();
      continue;
    }
    b.weights += L.router.matrix_bytes();
    FLINT_CUDA_CHECK(cudaMemcpy(ids.data(), f.expert_ids(static_cast<int>(l)), ids.size() * 4,
                                cudaMemcpyDeviceToHost));
    const std::set<int32_t> uniq(ids.begin(), ids.end());
    const double per_expert = static_cast<double>(
        L.exp_gate.matrix_bytes() + L.exp_up.matrix_bytes() + L.exp_down.matrix_bytes());
    b.weights += per_expert * static_cast<double>(uniq.size());
    if (L.has_separate_shared) {
      b.weights += L.sh_gate.matrix_bytes() + L.sh_up.matrix_bytes() + L.sh_down.matrix_bytes();
    }
  }
  // The greedy head reads the int8 copy, its row scales and bounds (and the few candidate rows in
  // FP32, not counted).
  b.weights += greedy_head ? w.greedy_head()->matrix_bytes() + 8.0 * w.lm_head().out
                           : w.lm_head().matrix_bytes();
  const double kv_row = 2.0 * c.num_kv_heads * c.head_dim * 2;  // K and V, bf16
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const int64_t keys = c.is_sliding(l) ? std::min(ctx, c.sliding_window) : ctx;
    b.kv += kv_row * static_cast<double>(keys) * batch;
  }
  return b;
}

// Charges event-timed intervals to op names (one un-captured step).
class EventTimer final : public OpTimer {
 public:
  explicit EventTimer(cudaStream_t s) {
    events_.push_back(new_event());
    FLINT_CUDA_CHECK(cudaEventRecord(events_.back(), s));
  }
  ~EventTimer() override {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
  }
  void mark(const char* op, cudaStream_t s) override {
    events_.push_back(new_event());
    FLINT_CUDA_CHECK(cudaEventRecord(events_.back(), s));
    ops_.push_back(op);
  }
  // Milliseconds per op name, in first-seen order.
  std::vector<std::pair<std::string, float>> totals() {
    FLINT_CUDA_CHECK(cudaEventSynchronize(events_.back()));
    std::vector<std::pair<std::string, float>> out;
    for (size_t i = 0; i < ops_.size(); ++i) {
      float ms = 0;
      FLINT_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[i], events_[i + 1]));
      auto it = std::find_if(out.begin(), out.end(), [&](auto& p) { return p.first == ops_[i]; });
      if (it == out.end()) {
        out.emplace_back(ops_[i], ms);
      } else {
        it->second += ms;
      }
    }
    return out;
  }

 private:
  static cudaEvent_t new_event() {
    cudaEvent_t e;
    FLINT_CUDA_CHECK(cudaEventCreate(&e));
    return e;
  }
  std::vector<cudaEvent_t> events_;
  std::vector<std::string> ops_;
};

struct Row {
  std::string dtype;
  int batch;
  int64_t ctx;
  float ms_graph, ms_stream;
  // The serving loop's step: upload_step, the graph's launch, the tokens copied back and a
  // synchronisation, one after another on the host (CudaBackend::forward_sample's pattern);
  // wall-clock median, ms. 0 when the step has no graph.
  float ms_host;
  double gb_weights, gb_kv, floor_gbs;
  std::vector<std::pair<std::string, float>> ops;  // per-op ms of one un-captured step
  std::string path;                                // the decode path the step took
  // Persistent path: block 0's work and barrier wait per phase kind, ms summed over the layers.
  std::vector<std::pair<std::string, float>> phases, waits;
  // --ablate: per op kind, the graph step's ms without that op's launches subtracted from the
  // full step's (what the op costs the step), ms.
  std::vector<std::pair<std::string, float>> ablation;
  std::vector<KTraceRow> ktrace;  // --ktrace
};

// --ktrace: replays `exec` with the kernels' timeline stamps on (a FLINT_KTRACE build) and
// summarises the records by kernel kind.
Result<std::vector<KTraceRow>> trace_graph(cudaGraphExec_t exec, int replays, int block,
                                           cudaStream_t s) {
  constexpr int kCap = 4096;
  FLINT_ASSIGN_OR_RETURN(DeviceBuffer buf, DeviceBuffer::allocate(ktrace_buffer_bytes(kCap)));
  FLINT_CUDA_CHECK(cudaStreamSynchronize(s));
  FLINT_CUDA_CHECK(ktrace_attach(buf.data(), kCap, block));
  std::vector<std::vector<KTraceRecord>> all;
  Status status = ok();
  for (int i = 0; i < replays + 2 && status; ++i) {  // the first two are a warm-up
    FLINT_CUDA_CHECK(cudaMemsetAsync(buf.data(), 0, kKTraceHeaderBytes, s));
    FLINT_CUDA_CHECK(cudaGraphLaunch(exec, s));
    uint32_t n = 0;
    FLINT_CUDA_CHECK(cudaMemcpyAsync(&n, buf.data(), sizeof n, cudaMemcpyDeviceToHost, s));
    FLINT_CUDA_CHECK(cudaStreamSynchronize(s));
    if (n > uint32_t(kCap)) {
      status = make_error(ErrorCode::kInternal, "ktrace: {} records, room for {}", n, kCap);
      break;
    }
    std::vector<KTraceRecord> recs(n);
    FLINT_CUDA_CHECK(cudaMemcpy(recs.data(), static_cast<char*>(buf.data()) + kKTraceHeaderBytes,
                                n * sizeof(KTraceRecord), cudaMemcpyDeviceToHost));
    if (i >= 2) all.push_back(std::move(recs));
  }
  FLINT_CUDA_CHECK(ktrace_attach(nullptr, 0));
  FLINT_TRY(status);
  return summarize_ktrace(all);
}

// Sums a persistent step's phase times (CudaForward::trace_persistent) by phase kind, in ms:
// block 0's work in each phase and, with `wait`, its time in the barrier after it.
std::vector<std::pair<std::string, float>> phase_totals(const model::FlintConfig& c,
                                                        const std::vector<double>& ns, bool wait) {
  std::vector<std::pair<std::string, float>> out;
  auto add = [&](const std::string& name, double v) {
    for (auto& [n, ms] : out) {
      if (n == name) {
        ms += static_cast<float>(v * 1e-6);
        return;
      }
    }
    out.emplace_back(name, static_cast<float>(v * 1e-6));
  };
  size_t i = wait ? 1 : 0;
  for (int64_t l = 0; l < c.num_hidden_layers && i < ns.size(); ++l) {
    const bool dense = c.layer_is_dense[l];
    const std::string attn = c.is_sliding(l) ? "attention_sliding" : "attention_full";
    const std::vector<std::string> names =
        dense ? std::vector<std::string>{"qkv_proj", attn, "o_proj", "dense_gate_up", "dense_down"}
              : std::vector<std::string>{"qkv_proj",   attn,          "o_proj",
                                         "moe_router", "moe_gate_up", "moe_down"};
    for (const std::string& n : names) {
      if (i < ns.size()) add(n, ns[i]);
      i += 2;
    }
  }
  return out;
}

Result<Row> bench_one(const DeviceWeights& w, const std::string& dtype, int batch, int64_t ctx,
                      const std::string& head, const BenchOptions& opt, double floor_gbs,
                      cudaStream_t s) {
  const model::FlintConfig& c = w.config();
  model::KvCacheSpec spec;
  spec.page_size = 16;
  const int64_t blocks_per_seq = ceil_div(ctx, spec.page_size);
  spec.num_pages = blocks_per_seq * batch;
  spec.num_rings = batch;
  FLINT_ASSIGN_OR_RETURN(auto fwd, CudaForward::create(w, spec));
  fwd->set_persistent_decode(opt.decode_path == "persistent");
  fwd->fill_kv_random(opt.seed + 7, s);
  model::StepInput st;
  st.max_blocks_per_seq = static_cast<int32_t>(blocks_per_seq);
  for (int b = 0; b < batch; ++b) {
    const int32_t pos = static_cast<int32_t>(ctx - 1);
    st.token_ids.push_back((b * 7919 + 11) % static_cast<int32_t>(c.vocab_size));
    st.positions.push_back(pos);
    st.query_start_loc.push_back(b);
    st.seq_lens.push_back(static_cast<int32_t>(ctx));
    st.ring_ids.push_back(b);
    for (int64_t k = 0; k < blocks_per_seq; ++k) {
      st.block_table.push_back(static_cast<int32_t>(b * blocks_per_seq + k));
    }
    st.slot_mapping.push_back(static_cast<int32_t>(
        (b * blocks_per_seq + pos / spec.page_size) * spec.page_size + pos % spec.page_size));
    st.logits_indices.push_back(b);
  }
  st.query_start_loc.push_back(batch);
  FLINT_ASSIGN_OR_RETURN(StepPlan plan, fwd->upload_step(st, s));
  if (head == "greedy" || head == "topk") {
    if (!fwd->greedy_head_serves(plan)) {
      return make_error(ErrorCode::kUnsupported,
                        "the greedy LM head does not serve this step (an FP32 head, 1-{} rows, "
                        "the layered path)",
                        CudaForward::kLmHeadGemvRows);
    }
    plan.head = head == "greedy" ? LmHead::kGreedy : LmHead::kTopK;
  }
  // "sample" and "topk" draw with Flint's recommended sampling (temperature 1, top_k 20, top_p
  // 0.95), from the full logits and from topk_logits' rows.
  const bool sampled = head == "sample" || head == "topk";
  FLINT_ASSIGN_OR_RETURN(DeviceBuffer next, DeviceBuffer::allocate(batch * 4));
  FLINT_ASSIGN_OR_RETURN(DeviceBuffer params, DeviceBuffer::allocate(batch * sizeof(SampleParams)));
  if (sampled) {
    constexpr int kTopK = 20;
    std::vector<SampleParams> p(static_cast<size_t>(batch));
    for (int b = 0; b < batch; ++b) p[b] = SampleParams{1.0f, kTopK, 0.95f, 0.0f, uint64_t(b), 0};
    FLINT_CUDA_CHECK(cudaMemcpy(params.data(), p.data(), p.size() * sizeof(SampleParams),
                                cudaMemcpyHostToDevice));
    if (plan.head == LmHead::kTopK) {
      const std::vector<int32_t> k(static_cast<size_t>(batch), kTopK);
      FLINT_CUDA_CHECK(cudaMemcpy(fwd->head_top_k(), k.data(), k.size() * sizeof(int32_t),
                                  cudaMemcpyHostToDevice));
    }
  }
  auto step = [&] {
    fwd->enqueue(plan, s);  // a greedy plan leaves the picks in fwd->greedy_tokens()
    if (sampled) {
      sample(next.as<int32_t>(), fwd->logits(), params.as<SampleParams>(), batch, c.vocab_size, s,
             plan.head == LmHead::kTopK ? fwd->topk_candidates() : SampleCandidates{});
    } else if (plan.head == LmHead::kLogits) {
      argmax(next.as<int32_t>(), fwd->logits(), batch, c.vocab_size, s);
    }
  };
  cudaEvent_t a, b;
  FLINT_CUDA_CHECK(cudaEventCreate(&a));
  FLINT_CUDA_CHECK(cudaEventCreate(&b));
  auto time_it = [&](auto&& fn, int n) {
    std::vector<float> t;
    for (int i = 0; i < opt.warmup; ++i) fn();
    for (int i = 0; i < n; ++i) {
      FLINT_CUDA_CHECK(cudaEventRecord(a, s));
      fn();
      FLINT_CUDA_CHECK(cudaEventRecord(b, s));
      FLINT_CUDA_CHECK(cudaEventSynchronize(b));
      float ms = 0;
      FLINT_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
      t.push_back(ms);
    }
    return median(t);
  };
  const float ms_stream = time_it(step, std::max(5, opt.steps / 4));
  float ms_graph = -1.0f;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  if (cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess) {
    step();
    if (cudaStreamEndCapture(s, &graph) == cudaSuccess &&
        cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess) {
      ms_graph = time_it([&] { FLINT_CUDA_CHECK(cudaGraphLaunch(exec, s)); }, opt.steps);
    }
  }
  if (ms_graph < 0) {
    (void)cudaGetLastError();
    spdlog::warn("bench: graph capture failed; stream timings only");
  }
  float ms_host = 0;
  if (exec != nullptr) {
    const int32_t* tokens =
        plan.head == LmHead::kGreedy ? fwd->greedy_tokens() : next.as<int32_t>();
    int32_t* h_tokens = nullptr;
    FLINT_CUDA_CHECK(cudaMallocHost(&h_tokens, batch * sizeof(int32_t)));
    std::vector<float> t;
    for (int i = 0; i < opt.warmup + opt.steps; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      auto p = fwd->upload_step(st, s);
      if (!p) {
        cudaFreeHost(h_tokens);
        return p.error().with_context("bench: host loop");
      }
      FLINT_CUDA_CHECK(cudaGraphLaunch(exec, s));
      copy_words(h_tokens, tokens, batch, s);  // as CudaBackend::launch_sample
      FLINT_CUDA_CHECK(cudaStreamSynchronize(s));
      const std::chrono::duration<float, std::milli> ms = std::chrono::steady_clock::now() - t0;
      if (i >= opt.warmup) t.push_back(ms.count());
    }
    cudaFreeHost(h_tokens);
    ms_host = median(t);
  }
  std::vector<KTraceRow> ktrace;
  if (opt.ktrace && exec != nullptr && !plan.persistent) {
    FLINT_ASSIGN_OR_RETURN(ktrace, trace_graph(exec, opt.steps, opt.ktrace_block, s));
  }
  if (exec != nullptr) cudaGraphExecDestroy(exec);
  if (graph != nullptr) cudaGraphDestroy(graph);
  std::vector<std::pair<std::string, float>> ablation;
  if (opt.ablate && ms_graph > 0 && !plan.persistent) {
    using F = CudaForward;
    const std::pair<const char*, uint32_t> kinds[] = {{"qkv_proj", F::kOpQkv},
                                                      {"attention_full", F::kOpAttentionFull},
                                                      {"attention_sliding", F::kOpAttentionSliding},
                                                      {"o_proj", F::kOpO},
                                                      {"moe_router", F::kOpRouter},
                                                      {"moe_gate_up", F::kOpGateUp},
                                                      {"moe_down", F::kOpDown}};
    for (const auto& [name, bit] : kinds) {
      fwd->set_skipped_ops(bit);
      cudaGraph_t g = nullptr;
      cudaGraphExec_t e = nullptr;
      float ms = -1.0f;
      if (cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess) {
        step();
        if (cudaStreamEndCapture(s, &g) == cudaSuccess &&
            cudaGraphInstantiate(&e, g, 0) == cudaSuccess) {
          ms = time_it([&] { FLINT_CUDA_CHECK(cudaGraphLaunch(e, s)); }, opt.steps);
        }
      }
      if (e != nullptr) cudaGraphExecDestroy(e);
      if (g != nullptr) cudaGraphDestroy(g);
      fwd->set_skipped_ops(0);
      if (ms < 0) {
        (void)cudaGetLastError();
        return make_error(ErrorCode::kInternal, "bench: graph capture without {} failed", name);
      }
      ablation.emplace_back(name, ms_graph - ms);
    }
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  FLINT_CUDA_CHECK(cudaStreamSynchronize(s));
  const StepBytes bytes = step_bytes(w, *fwd, batch, ctx, plan.head != LmHead::kLogits);
  std::vector<std::pair<std::string, float>> ops, phases, waits;
  {
    EventTimer timer(s);
    fwd->enqueue(plan, s, &timer);
    ops = timer.totals();
  }
  if (plan.persistent) {
    std::vector<double> best;  // the fastest of 5 traced steps
    for (int i = 0; i < 5; ++i) {
      FLINT_ASSIGN_OR_RETURN(std::vector<double> t, fwd->trace_persistent(plan, s));
      double sum = 0, best_sum = 0;
      for (double v : t) sum += v;
      for (double v : best) best_sum += v;
      if (best.empty() || sum < best_sum) best = std::move(t);
    }
    phases = phase_totals(c, best, false);
    waits = phase_totals(c, best, true);
  }
  return Row{dtype,
             batch,
             ctx,
             ms_graph,
             ms_stream,
             ms_host,
             bytes.weights / 1e9,
             bytes.kv / 1e9,
             floor_gbs,
             ops,
             plan.persistent  ? "persistent"
             : head == "full" ? "layered"
                              : head,
             phases,
             waits,
             ablation,
             ktrace};
}

// Seconds since this process started (Linux: /proc/self/stat start time against /proc/uptime).
double process_age_s() {
  std::ifstream up("/proc/uptime"), st("/proc/self/stat");
  double uptime = 0;
  up >> uptime;
  std::string stat((std::istreambuf_iterator<char>(st)), std::istreambuf_iterator<char>());
  const size_t close = stat.rfind(')');
  if (close == std::string::npos || uptime <= 0) return -1;
  std::stringstream rest(stat.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22 && rest >> field; ++i) {
    if (i == 22)
      return uptime - std::atof(field.c_str()) / static_cast<double>(sysconf(_SC_CLK_TCK));
  }
  return -1;
}

struct PrefillRow {
  std::string dtype;
  int64_t tokens;
  int chunk;
  float ms;  // median over runs: first chunk's upload to the last chunk's logits
  std::vector<std::pair<std::string, float>> ops;  // per-op ms of the prompt's last chunk
};

// One sequence prefills `tokens` prompt tokens in steps of `chunk` (logits for the last token
// only, as the engine asks); the wall time of the whole prompt includes each step's upload.
Result<PrefillRow> bench_prefill(const DeviceWeights& w, const std::string& dtype, int64_t tokens,
                                 const BenchOptions& opt, cudaStream_t s) {
  const model::FlintConfig& c = w.config();
  model::KvCacheSpec spec;
  spec.page_size = 16;
  const int64_t blocks = ceil_div(tokens, spec.page_size);
  spec.num_pages = blocks;
  spec.num_rings = 1;
  FLINT_ASSIGN_OR_RETURN(auto fwd, CudaForward::create(w, spec));
  std::vector<model::StepInput> steps;
  for (int64_t b = 0; b < tokens; b += opt.prefill_chunk) {
    const int64_t n = std::min<int64_t>(opt.prefill_chunk, tokens - b);
    model::StepInput st;
    st.max_blocks_per_seq = static_cast<int32_t>(blocks);
    for (int64_t k = 0; k < blocks; ++k) st.block_table.push_back(static_cast<int32_t>(k));
    for (int64_t i = 0; i < n; ++i) {
      const int64_t pos = b + i;
      st.token_ids.push_back(static_cast<int32_t>((pos * 7919 + 11) % c.vocab_size));
      st.positions.push_back(static_cast<int32_t>(pos));
      st.slot_mapping.push_back(static_cast<int32_t>(pos));
    }
    st.query_start_loc = {0, static_cast<int32_t>(n)};
    st.seq_lens = {static_cast<int32_t>(b + n)};
    st.ring_ids = {0};
    if (b + n == tokens) st.logits_indices = {static_cast<int32_t>(n - 1)};
    steps.push_back(std::move(st));
  }
  cudaEvent_t e0, e1;
  FLINT_CUDA_CHECK(cudaEventCreate(&e0));
  FLINT_CUDA_CHECK(cudaEventCreate(&e1));
  std::vector<float> times;
  Status failed = ok();
  for (int run = 0; run <= opt.prefill_runs && failed; ++run) {
    FLINT_CUDA_CHECK(cudaEventRecord(e0, s));
    for (const model::StepInput& st : steps) {
      auto plan = fwd->upload_step(st, s);
      if (!plan) {
        failed = plan.error();
        break;
      }
      fwd->enqueue(*plan, s);
    }
    FLINT_CUDA_CHECK(cudaEventRecord(e1, s));
    FLINT_CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    FLINT_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    if (run > 0) times.push_back(ms);  // run 0 warms up
    spdlog::info("bench: prefill {} {} tokens run {}: {:.1f} ms", dtype, tokens, run, ms);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  if (!failed) return failed.error();
  PrefillRow row{dtype, tokens, opt.prefill_chunk, median(times), {}};
  // Per-op split of the last chunk (it re-writes the same KV; the attention sees the full prompt).
  FLINT_ASSIGN_OR_RETURN(StepPlan plan, fwd->upload_step(steps.back(), s));
  EventTimer timer(s);
  fwd->enqueue(plan, s, &timer);
  row.ops = timer.totals();
  return row;
}

// Every op name of the rows, in first-seen order (the decode and prefill paths differ).
std::vector<std::string> op_names(
    const std::vector<std::vector<std::pair<std::string, float>>>& ops) {
  std::vector<std::string> names;
  for (const auto& row : ops) {
    for (const auto& [op, ms] : row) {
      if (std::find(names.begin(), names.end(), op) == names.end()) names.push_back(op);
    }
  }
  return names;
}

// A markdown table of per-op ms: one row per entry, `labels` already formatted as leading cells
// ("a | b"), `head` the matching header cells and `head_cols` their count.
void print_ops_table(const std::vector<std::vector<std::pair<std::string, float>>>& ops,
                     const std::vector<std::string>& labels, const std::string& head,
                     int head_cols) {
  if (ops.empty()) return;
  const std::vector<std::string> names = op_names(ops);
  fmt::print("| {} |", head);
  for (const std::string& op : names) fmt::print(" {} |", op);
  fmt::print("\n|");
  for (int i = 0; i < head_cols; ++i) fmt::print("---|");
  for (size_t i = 0; i < names.size(); ++i) fmt::print("---:|");
  fmt::print("\n");
  for (size_t r = 0; r < ops.size(); ++r) {
    fmt::print("| {} |", labels[r]);
    for (const std::string& op : names) {
      float v = 0;
      for (const auto& [o2, m2] : ops[r]) {
        if (o2 == op) v = m2;
      }
      fmt::print(" {:.3f} |", v);
    }
    fmt::print("\n");
  }
}

}  // namespace

Status run_decode_bench(const model::FlintConfig& config, const BenchOptions& opt) {
  const auto t_start = std::chrono::steady_clock::now();
  std::vector<PrefillRow> prefill_rows;
  FLINT_TRY(validate_bench_options(config, opt));
  std::vector<std::string> heads = opt.heads;
  if (heads.empty()) {
    heads = {"full"};
    if (opt.decode_path == "layered") heads.push_back("greedy");
  }
  if (!device_available()) return make_error(ErrorCode::kUnavailable, "no CUDA device available");
  cudaStream_t s;
  FLINT_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaDeviceProp prop{};
  FLINT_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  FLINT_ASSIGN_OR_RETURN(const double floor_gbs, measure_read_floor(s));
  spdlog::info("bench: {} ({} SMs), read-stream floor {:.0f} GB/s", prop.name,
               prop.multiProcessorCount, floor_gbs);
  std::vector<Row> rows;
  std::vector<std::string> notes;
  for (const std::string& name : opt.dtypes) {
    const DType dt = name == "bf16" ? DType::kBF16 : DType::kNVFP4;
    const auto t0 = std::chrono::steady_clock::now();
    auto w = DeviceWeights::dummy(config, dt, opt.seed, s);
    if (!w) return w.error().with_context("dummy {} weights", name);
    const double ready_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    notes.push_back(fmt::format("{}: {:.2f} GB of weights generated on the GPU in {:.2f} s", name,
                                w->bytes() / 1e9, ready_s));
    spdlog::info("bench: {}", notes.back());
    {
      // Ready = weights plus a KV cache for one full-length (max_position_embeddings) sequence,
      // timed from process start (device init and the read-stream floor run before this).
      const auto k0 = std::chrono::steady_clock::now();
      model::KvCacheSpec spec;
      spec.page_size = 16;
      spec.num_pages = ceil_div(config.max_position_embeddings, spec.page_size);
      spec.num_rings = 1;
      auto kv = CudaForward::create(*w, spec);
      if (!kv) return kv.error().with_context("KV cache for the ready time");
      FLINT_CUDA_CHECK(cudaDeviceSynchronize());
      const double kv_s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - k0).count();
      if (&name == &opt.dtypes.front()) {
        notes.push_back(fmt::format(
            "{}: ready (weights + {:.2f} GB KV cache for {} tokens) {:.2f} s after process start "
            "(device init, the read-stream floor, weights {:.2f} s, KV {:.2f} s)",
            name, (*kv)->kv_bytes() / 1e9, config.max_position_embeddings, process_age_s(), ready_s,
            kv_s));
      } else {
        notes.push_back(fmt::format("{}: weights {:.2f} s + KV cache ({:.2f} GB) {:.2f} s", name,
                                    ready_s, (*kv)->kv_bytes() / 1e9, kv_s));
      }
      spdlog::info("bench: {}", notes.back());
    }
    for (int64_t tokens : opt.prefill_lengths) {
      auto r = bench_prefill(*w, name, tokens, opt, s);
      if (!r) {
        notes.push_back(fmt::format("{} prefill {}: {}", name, tokens, r.error().message));
        spdlog::warn("bench: {}", notes.back());
        continue;
      }
      prefill_rows.push_back(*r);
    }
    for (int batch : opt.batches) {
      for (int64_t ctx : opt.contexts) {
        const auto [free_b, total_b] = device_memory_info();
        double kv_need = 0;  // what CudaForward::create will allocate, plus the ring padding
        for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
          const int64_t keys = config.is_sliding(l) ? config.sliding_window : ctx + 16;
          kv_need += 2.0 * config.num_kv_heads * config.head_dim * 2 * double(keys) * batch;
        }
        if (kv_need > double(free_b) - (1.0 - opt.gpu_memory_utilization) * double(total_b) - 2e9) {
          notes.push_back(fmt::format("{} batch {} ctx {}: skipped, the KV cache does not fit",
                                      name, batch, ctx));
          spdlog::warn("bench: {}", notes.back());
          continue;
        }
        for (const std::string& head : heads) {
          auto r = bench_one(*w, name, batch, ctx, head, opt, floor_gbs, s);
          if (!r) {
            notes.push_back(fmt::format("{} batch {} ctx {} head {}: {}", name, batch, ctx, head,
                                        r.error().message));
            spdlog::warn("bench: {}", notes.back());
            continue;
          }
          spdlog::info("bench: {} b{} ctx {} {}: {:.3f} ms (graph), {:.3f} ms (stream)", name,
                       batch, ctx, r->path, r->ms_graph, r->ms_stream);
          rows.push_back(*r);
        }
      }
    }
  }
  fmt::print("GPU: {}; read-stream floor {:.0f} GB/s (4 GiB, median of 10)\n\n", prop.name,
             floor_gbs);
  fmt::print(
      "| weights | batch | context | path | ms/step (graph) | ms/step (no graph) | weights GB | "
      "KV GB | floor ms | achieved GB/s | of floor | ms/step (host loop) |\n");
  fmt::print("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const Row& r : rows) {
    const double gb = r.gb_weights + r.gb_kv;
    const float ms = r.ms_graph > 0 ? r.ms_graph : r.ms_stream;
    const double floor_ms = gb / r.floor_gbs * 1e3;
    fmt::print(
        "| {} | {} | {} | {} | {:.3f} | {:.3f} | {:.3f} | {:.3f} | {:.3f} | {:.0f} | {:.0f}% | "
        "{:.3f} |\n",
        r.dtype, r.batch, r.ctx, r.path, r.ms_graph, r.ms_stream, r.gb_weights, r.gb_kv, floor_ms,
        gb / ms * 1e3, 100.0 * floor_ms / ms, r.ms_host);
  }
  fmt::print(
      "\nPer-op time of one un-captured step of the layered path (events between ops; includes "
      "launch gaps), ms:\n\n");
  {
    std::vector<std::vector<std::pair<std::string, float>>> ops;
    std::vector<std::string> labels;
    for (const Row& r : rows) {
      ops.push_back(r.ops);
      labels.push_back(fmt::format("{} | {} | {}", r.dtype, r.batch, r.ctx));
    }
    print_ops_table(ops, labels, "weights | batch | context", 3);
  }
  {
    std::vector<std::vector<std::pair<std::string, float>>> ablation;
    std::vector<std::string> labels;
    for (const Row& r : rows) {
      if (r.ablation.empty()) continue;
      ablation.push_back(r.ablation);
      labels.push_back(fmt::format("{} | {} | {}", r.dtype, r.batch, r.ctx));
    }
    if (!ablation.empty()) {
      fmt::print(
          "\nWhat each op kind costs the graph step (--ablate: the step's graph with that op's "
          "launches left out, subtracted from the full step; the results of such a step are "
          "meaningless, its time is not), ms:\n\n");
      print_ops_table(ablation, labels, "weights | batch | context", 3);
    }
  }
  for (const Row& r : rows) {
    if (r.ktrace.empty()) continue;
    fmt::print(
        "\nKernel timeline, {} batch {} context {} (--ktrace: block {}'s %globaltimer stamps "
        "(linear index, clamped to each grid), mean us over {} graph replays; marks per kind in "
        "kernels/ktrace.h; cycle = this launch's wait end to the next one's, cycle x n = its share "
        "of the step; end->next split into that block's end -> the launch's last warp end -> the "
        "next wait end; start = the block's first stamp after the previous launch's last warp end, "
        "negative when it started before that launch ended):\n\n",
        r.dtype, r.batch, r.ctx, opt.ktrace_block, opt.steps);
    fmt::print(
        "| kernel grid | n/step | start | before wait | wait | ->A | ->B | ->C | ->end | "
        "end->next | ->last end | ->next wait | cycle | cycle x n ms |\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    double total = 0;
    for (const KTraceRow& k : r.ktrace) {
      const double share = k.cycle * k.per_step * 1e-3;
      total += share;
      fmt::print(
          "| {} | {:.0f} | {} | {:.2f} | {:.2f} | {:.2f} | {:.2f} | {:.2f} | {:.2f} | {:.2f} | "
          "{:.2f} | {:.2f} | {:.2f} | {:.3f} |\n",
          k.kind, k.per_step,
          k.start_cycles > 0 ? fmt::format("{:.2f}", k.start_after_prev) : std::string("-"),
          k.prologue, k.wait, k.seg[0], k.seg[1], k.seg[2], k.tail, k.to_next, k.straggle,
          k.handoff, k.cycle, share);
    }
    fmt::print("| all traced | | | | | | | | | | | | | {:.3f} |\n", total);
  }
  for (const bool wait : {false, true}) {
    std::vector<std::vector<std::pair<std::string, float>>> phases;
    std::vector<std::string> labels;
    for (const Row& r : rows) {
      if (r.phases.empty()) continue;
      phases.push_back(wait ? r.waits : r.phases);
      labels.push_back(fmt::format("{} | {} | {}", r.dtype, r.batch, r.ctx));
    }
    if (phases.empty()) break;
    fmt::print("{}", wait ? "\nPersistent kernel: block 0's wait in the grid barrier after each "
                            "phase kind, summed over the layers, ms:\n\n"
                          : "\nPersistent kernel: block 0's work per phase kind (barrier exit to "
                            "the next arrival), summed over the layers, fastest of 5 traced steps, "
                            "ms:\n\n");
    print_ops_table(phases, labels, "weights | batch | context", 3);
  }
  fmt::print("\n");
  if (!prefill_rows.empty()) {
    fmt::print(
        "Prefill: one sequence, the prompt in steps of at most `chunk` tokens (logits for the last "
        "token), median of {} runs after a warm-up; host uploads included.\n\n",
        opt.prefill_runs);
    fmt::print("| weights | prompt tokens | chunk | ms | tokens/s |\n|---|---:|---:|---:|---:|\n");
    for (const PrefillRow& r : prefill_rows) {
      fmt::print("| {} | {} | {} | {:.1f} | {:.0f} |\n", r.dtype, r.tokens, r.chunk, r.ms,
                 r.ms > 0 ? r.tokens / (r.ms / 1e3) : 0.0);
    }
    fmt::print("\nPer-op time of the last chunk of each prompt (events between ops), ms:\n\n");
    std::vector<std::vector<std::pair<std::string, float>>> ops;
    std::vector<std::string> labels;
    for (const PrefillRow& r : prefill_rows) {
      ops.push_back(r.ops);
      labels.push_back(fmt::format("{} | {}", r.dtype, r.tokens));
    }
    print_ops_table(ops, labels, "weights | prompt tokens", 2);
    fmt::print("\n");
  }
  for (const auto& n : notes) fmt::print("- {}\n", n);
  fmt::print("- total bench time {:.1f} s\n",
             std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count());
  cudaStreamDestroy(s);
  return ok();
}

}  // namespace flint::cuda
