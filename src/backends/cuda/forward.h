// The CUDA forward pass over model::StepInput: KV cache, workspaces and the kernel sequence of
// one step. Checked op by op against the CPU reference (tests/kernels) and end to end by
// tests/gpu. Not thread-safe; one engine thread owns it.
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/device.h"
#include "backends/cuda/kernels/decode_attention.h"
#include "backends/cuda/kernels/decode_persistent.h"
#include "backends/cuda/kernels/kv_layout.h"
#include "backends/cuda/kernels/moe_grouped.h"
#include "backends/cuda/kernels/sampling.h"
#include "backends/cuda/weights.h"
#include "model/step.h"

namespace flint::cuda {

// Optional per-op timing of an un-captured step: enqueue() calls mark(op) after each op's launches;
// the time from the previous mark is charged to `op`.
class OpTimer {
 public:
  virtual ~OpTimer() = default;
  virtual void mark(const char* op, cudaStream_t s) = 0;
};

// What a step's LM head leaves behind.
enum class LmHead {
  kLogits,  // logits(): every logit of every row
  kGreedy,  // greedy_tokens(): each row's arg max, from the greedy head's int8 copy
  // logits(): each row's exact logits of the rows that can be among its top K (head_top_k(),
  // written by the caller before the enqueue), -inf elsewhere (topk_logits): sample() draws
  // what it would from the whole row.
  kTopK,
};

// Host-side facts about an uploaded step that the enqueue needs. enqueue() depends on nothing
// else of the step (context lengths are read on the device), so equal plans can replay one
// captured CUDA graph.
struct StepPlan {
  int num_tokens = 0;
  int num_seqs = 0;
  int num_logits = 0;
  int max_blocks_per_seq = 0;  // device block_table row stride: a power of two >= 16
  // Attention splits per layer kind, chosen from the most keys any row sees rounded up to a power
  // of two (so neighbouring context lengths share a plan).
  int full_splits = 1;
  int sliding_splits = 1;
  // Every sequence has exactly one new token: q/k norm, RoPE, the K/V cache write and attention
  // are one launch per layer (decode_attention_fused).
  bool decode = false;
  // A decode step of at most kPersistentMaxRows rows on a model the persistent kernel supports:
  // all layers run in one launch (kernels/decode_persistent.h).
  bool persistent = false;
  // What the LM head writes (CudaForward::greedy_head_serves; kernels/greedy_head.h). Set by the
  // caller after upload_step.
  LmHead head = LmHead::kLogits;
  // Graph cache key (cuda_backend.cpp): equal plans enqueue identical launches.
  bool operator==(const StepPlan&) const = default;
};

// Scratch of the prefill path (forward_prefill.cpp), sized for the largest prefill step seen.
struct PrefillWorkspace {
  PrefillWorkspace() = default;
  ~PrefillWorkspace();
  PrefillWorkspace(const PrefillWorkspace&) = delete;
  PrefillWorkspace& operator=(const PrefillWorkspace&) = delete;

  cublasHandle_t cublas = nullptr;  // BF16 GEMMs; bound to the enqueue stream at each call
  DeviceBuffer buf;
  int cap_tokens = 0;
  __nv_bfloat16* x = nullptr;    // [T, max(hidden, H * D)] bf16 input of the next GEMM
  __nv_bfloat16* act = nullptr;  // [T, max(I_dense, I_shared)] bf16 SwiGLU activations
  MoeGroupedWorkspace moe;       // grouped experts for T * slots pairs
  // Per layer: the router as f32 [E, hidden] for an exact SGEMM, or null (then the GEMV).
  std::vector<const float*> router_f32;
  __nv_bfloat16* w_bf16 = nullptr;  // scratch: one dense NVFP4 matrix decoded for cuBLAS
  DeviceBuffer weights_buf;         // router_f32 copies and w_bf16, made once
};

class CudaForward {
 public:
  // Steps with more tokens than this run through enqueue_prefill (tensor-core GEMMs and the
  // flash-attention kernel); smaller ones through the decode kernels, whose f32 activations also
  // keep small mixed steps bit-close to the CPU reference.
  static constexpr int kPrefillMinTokens = 32;
  // Logits rows up to which the LM head is one pass of the GEMV (whose 8-row kernel reads the head
  // once); steps with more go through cuBLAS (gemm_f32_activations) when the head's dtype allows.
  // An FP32 head (the model's) goes to cuBLAS from 2 rows: our GEMV stages every block's normed
  // rows, as many bytes as the block's weights at 8 rows (1.09 ms at 8 rows for 1.23 GB).
  static constexpr int kLmHeadGemvRows = 8;
  // Layered steps of up to this many tokens pick each MoE layer's experts in the gate/up kernel
  // (gemv_gated_routed_experts, every block the top-k of its token) after a router GEMV with no
  // top-k tail. H200, ms per step (graph): NVFP4 b1 1K 2.436 -> 2.362, 100K 3.181 -> 3.125; BF16
  // b1 1K 2.900 -> 2.851. At batch 8 (seventh session) the top-k in each gate/up block cost more
  // than the tail it saved (NVFP4 10.46 -> 10.72). With the whole block picking
  // (top_k_token_block; fourteenth session, scripts/gpu.sh sweep, three rounds, ms per step at
  // 1K / 100K), two NVFP4 tokens gain too: b2 3.100 -> 3.030 / 4.456 -> 4.385; two BF16 tokens
  // lose: 3.769 -> 3.939 / 5.088 -> 5.273.
  static constexpr int kRoutedGateUpMaxTokens = 1;
  static constexpr int kRoutedGateUpMaxTokensNvfp4 = 2;  // NVFP4 experts

  // Allocates the KV cache described by `kv` (full layers paged, sliding layers as rings).
  static Result<std::unique_ptr<CudaForward>> create(const DeviceWeights& w,
                                                     const model::KvCacheSpec& kv);
  ~CudaForward();

  // Validates a step against the config and the KV cache and copies its metadata to the device
  // (stream-ordered; one kernel that reads the pinned staging, kernels/copy_words.h). `chain`:
  // device tokens, one per token, that replace the step's token ids (CudaBackend's chained
  // steps). May grow workspaces, so it must not be called while capturing a graph.
  Result<StepPlan> upload_step(const model::StepInput& step, cudaStream_t s,
                               const int32_t* chain = nullptr);
  // Enqueues the forward of the uploaded step: launches only, no allocation and no sync, so it
  // can be captured in a CUDA graph. Logits land in logits().
  void enqueue(const StepPlan& plan, cudaStream_t s, OpTimer* timer = nullptr);
  // The prefill-size kernel sequence of enqueue(): correct for any step (several sequences,
  // chunks mixed with decode tokens, chunks longer than the window, cached prefixes). Launches
  // only; needs the workspace that upload_step reserves for steps over kPrefillMinTokens.
  void enqueue_prefill(const StepPlan& plan, cudaStream_t s, OpTimer* timer = nullptr);
  // The layered decode path of enqueue() (a launch per op), for steps of up to kPrefillMinTokens.
  void enqueue_layered(const StepPlan& plan, cudaStream_t s, OpTimer* timer);

  const float* logits() const { return ws_logits_; }  // [num_logits, vocab_size] f32
  // Whether the plan's logits rows can take the greedy head (LmHead::kGreedy or kTopK): an FP32
  // LM head with its int8 copy (DeviceWeights::greedy_head), 1..kLmHeadGemvRows rows, the
  // layered or prefill path.
  bool greedy_head_serves(const StepPlan& plan) const;
  // [num_logits] after an LmHead::kGreedy step: each row's arg max, as argmax over logits()
  // would pick it from the one-row FP32 GEMV's logits.
  const int32_t* greedy_tokens() const { return d_greedy_tokens_; }
  // [kLmHeadGemvRows] device ints: each logits row's K for LmHead::kTopK steps (1 ..
  // kTopKHeadMax), written by the caller (stream-ordered) before the enqueue; null without a
  // greedy head.
  int32_t* head_top_k() const { return d_head_top_k_; }
  // After an LmHead::kTopK step: the tokens of each logits row that are not -inf in logits(), as
  // sample()'s candidate list, which then draws without a pass over the rows (null without a
  // greedy head).
  SampleCandidates topk_candidates() const {
    return SampleCandidates{d_cand_count_, d_cand_ids_, d_cand_logits_};
  }
  const int32_t* expert_ids(int layer) const;  // [num_tokens, slots] of the last step
  int slots() const { return slots_; }
  // Copies sliding ring src to dst in every sliding layer (stream-ordered).
  void copy_ring(int32_t src, int32_t dst, cudaStream_t s);
  // Fills the whole KV cache with random bf16 values (benchmarks over a synthetic context).
  void fill_kv_random(uint64_t seed, cudaStream_t s);
  int64_t kv_bytes() const { return static_cast<int64_t>(kv_.size()); }
  const DeviceWeights& weights() const { return w_; }
  // Grows the step-sized buffers to at least these sizes now (so that later steps need not).
  Status reserve_capacity(int num_tokens, int num_seqs, int64_t table_len, int num_logits) {
    return reserve(num_tokens, num_seqs, table_len, num_logits);
  }
  // Bumped whenever the step-sized buffers move: CUDA graphs captured before hold stale pointers.
  uint64_t buffer_generation() const { return buffer_generation_; }
  // Small decode steps run all layers in the persistent kernel when the model allows it, or (off,
  // the default) the layered path of a launch per op. The persistent kernel is an experiment: it
  // is correct but slower on the H200 today (docs/PERFORMANCE.md). Takes effect at the next
  // upload_step (it is part of the StepPlan, so graphs of either path stay valid).
  void set_persistent_decode(bool on) { persistent_on_ = on; }
  // Benchmark only (`flint bench --ablate`): ops of the layered decode path that enqueue leaves
  // out, a mask of DecodeOp bits, so that a graph of the rest times what each op costs the step.
  // The step's results are then meaningless, and the left-out ops' outputs keep the values of
  // the last step that ran them (run a full step first). 0 (the default) runs everything.
  enum DecodeOp : uint32_t {
    kOpQkv = 1u << 0,
    kOpAttentionFull = 1u << 1,
    kOpAttentionSliding = 1u << 2,
    kOpO = 1u << 3,
    kOpRouter = 1u << 4,
    kOpGateUp = 1u << 5,
    kOpDown = 1u << 6,
  };
  void set_skipped_ops(uint32_t mask) { skipped_ops_ = mask; }
  // Whether the persistent kernel can run this model, and if not, why.
  bool persistent_decode_available() const { return persistent_shape_.ok; }
  const std::string& persistent_decode_unavailable_reason() const { return persistent_shape_.why; }
  // Runs the uploaded persistent step once with phase timestamps (benchmarks): per phase, in
  // order (per layer: qkv, attention, o, router or dense gate/up, gate/up or dense down, experts
  // down), the ns block 0 worked (from leaving the last barrier to reaching the next, or to its
  // end) and the ns it then waited in the barrier (none after the last phase). Syncs.
  Result<std::vector<double>> trace_persistent(const StepPlan& plan, cudaStream_t s);
  // Steps uploaded with plan.persistent (graph replays included).
  int64_t persistent_steps() const { return persistent_steps_; }

 private:
  CudaForward(const DeviceWeights& w, const model::KvCacheSpec& kv) : w_(w), spec_(kv) {}
  Status reserve(int num_tokens, int num_seqs, int64_t table_len, int num_logits);
  Status reserve_prefill(int num_tokens);
  // The final norm and the LM head over the step's logits rows (both enqueue paths).
  void enqueue_lm_head(const StepPlan& plan, cudaStream_t s);
  // Logits rows up to which the LM head runs on the GEMV (kLmHeadGemvRows, 1 for an FP32 head).
  int lm_head_gemv_rows() const;
  Status prepare_prefill_weights();
  // Builds the persistent kernel's layer table (after the KV cache exists).
  Status prepare_persistent();
  void enqueue_persistent(const StepPlan& plan, cudaStream_t s, uint64_t* trace = nullptr);
  // The config's MoE routing parameters, with the shared expert's slices.
  MoeRouting routing() const;
  // Where the uploaded step's tokens read and write the KV cache (device metadata views).
  TokenKv token_kv(const StepPlan& plan) const;
  // The decode attention's shape and split count for a full or sliding layer of the step.
  DecodeAttentionArgs decode_attention_args(const StepPlan& plan, bool sliding) const;
  __nv_bfloat16* k_cache(int layer) const;
  __nv_bfloat16* v_cache(int layer) const;

  const DeviceWeights& w_;
  model::KvCacheSpec spec_;
  DeviceBuffer kv_;
  std::vector<int64_t> kv_offset_;  // per layer: element offset of K; V follows after kv_elems_
  std::vector<int64_t> kv_elems_;
  int slots_ = 0;
  int64_t max_act_cols_ = 0;

  // Elements one staged array of n int32 takes in meta_ (and the pinned halves): n rounded up to
  // 16, so that every array starts 64-byte aligned.
  static constexpr int64_t staged_offset(int64_t n) { return (n + 15) / 16 * 16; }

  // Capacity of the step-sized buffers.
  int cap_tokens_ = 0, cap_seqs_ = 0, cap_logits_ = 0;
  int64_t cap_table_ = 0;
  DeviceBuffer meta_, work_;
  int32_t* pinned_ = nullptr;
  size_t pinned_elems_ = 0;
  // Views into meta_ (int32; the nine staged arrays' views are set by each upload_step, at offsets
  // its plan fixes) and work_ (f32).
  int32_t *d_tokens_ = nullptr, *d_pos_ = nullptr, *d_seq_ = nullptr, *d_slots_ = nullptr,
          *d_rings_ = nullptr, *d_table_ = nullptr, *d_logit_rows_ = nullptr, *d_ids_ = nullptr,
          *d_qsl_ = nullptr, *d_seq_lens_ = nullptr, *d_route_counter_ = nullptr;
  // Zeroed before each decode step that routes in the gate/up kernels: the one-token router sums
  // of gemv_route_partials ([num_hidden_layers, num_experts + 1] doubles), then the routed picks'
  // counters ([num_hidden_layers] int32).
  DeviceBuffer route_state_;
  double* d_route_acc_ = nullptr;
  int32_t* d_pick_ready_ = nullptr;
  float *ws_h_ = nullptr, *ws_a_ = nullptr, *ws_qkv_ = nullptr, *ws_q_ = nullptr,
        *ws_attn_ = nullptr, *ws_act_ = nullptr, *ws_rlogits_ = nullptr, *ws_rw_ = nullptr,
        *ws_attn_part_ = nullptr, *ws_logits_ = nullptr, *ws_alog_ = nullptr, *ws_kstep_ = nullptr,
        *ws_vstep_ = nullptr;   // bf16 [num_tokens, Hkv, D] each
  float* ws_xinv_ = nullptr;    // [num_tokens] 1 / rms of the router's normed rows (ws_a_)
  DeviceBuffer attn_counters_;  // int32 [cap_tokens_, Hkv], zero between launches
  // The greedy head's scratch: approximate logits [kLmHeadGemvRows, vocab], the picks' keys (zero
  // between steps), the tokens, the rows' K, topk_logits' maxima and candidate lists.
  DeviceBuffer greedy_buf_;
  float* ws_greedy_approx_ = nullptr;
  int32_t* d_greedy_tokens_ = nullptr;
  uint64_t* d_greedy_keys_ = nullptr;
  int32_t* d_head_top_k_ = nullptr;
  float* ws_topk_maxima_ = nullptr;
  uint32_t* d_cand_count_ = nullptr;  // topk_logits' candidate lists (SampleCandidates)
  int32_t* d_cand_ids_ = nullptr;
  float* d_cand_logits_ = nullptr;
  int num_sms_ = 1;
  // Pinned staging is double-buffered: upload_step fills pinned_ and pinned_back_ in turn and
  // waits only for the copies out of the same half two steps ago (staged_[half]).
  int32_t* pinned_back_ = nullptr;
  cudaEvent_t staged_[2] = {nullptr, nullptr};
  int stage_ = 0;
  uint64_t buffer_generation_ = 0;
  std::vector<int32_t> seq_idx_;  // [num_tokens] reused host scratch
  std::vector<int32_t> table_;    // [num_seqs, stride] reused host scratch
  PrefillWorkspace prefill_;
  // The persistent decode kernel: its layer table, grid barrier and launch shape.
  DeviceBuffer persistent_layers_, persistent_barrier_;
  PersistentDecodeShape persistent_shape_;
  PersistentDecodeArgs persistent_args_;  // the model's part, from prepare_persistent
  bool persistent_on_ = false;
  uint32_t skipped_ops_ = 0;  // set_skipped_ops
  int64_t persistent_steps_ = 0;
};

}  // namespace flint::cuda
