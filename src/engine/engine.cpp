// Engine: the engine thread around EngineCore, and OutputStream. Test: engine_test.cpp.
#include "engine/engine.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <unordered_set>

#include "engine/engine_core.h"

namespace flint::engine {

int default_max_num_batched_tokens(bool gpu, uint64_t gpu_total_bytes, std::string_view gpu_name) {
  constexpr uint64_t kLargeGpu = uint64_t{70} << 30;
  std::string name(gpu_name);
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  const bool large = gpu && gpu_total_bytes >= kLargeGpu && name.find("a100") == std::string::npos;
  return large ? 8192 : 2048;
}

std::optional<RequestOutput> OutputStream::next(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return !queue_.empty() || final_taken_; });
  if (queue_.empty()) return std::nullopt;
  RequestOutput out = std::move(queue_.front());
  queue_.pop_front();
  if (out.finished) final_taken_ = true;
  return out;
}

std::vector<RequestOutput> OutputStream::drain() {
  std::lock_guard lock(mu_);
  std::vector<RequestOutput> out(std::make_move_iterator(queue_.begin()),
                                 std::make_move_iterator(queue_.end()));
  queue_.clear();
  for (const RequestOutput& o : out)
    if (o.finished) final_taken_ = true;
  return out;
}

bool OutputStream::done() const {
  std::lock_guard lock(mu_);
  return final_taken_;
}

void OutputStream::push(RequestOutput out) {
  {
    std::lock_guard lock(mu_);
    if (final_pushed_) return;
    final_pushed_ = out.finished;
    queue_.push_back(std::move(out));
  }
  cv_.notify_all();
}

Result<std::unique_ptr<Engine>> Engine::create(EngineConfig config,
                                               std::unique_ptr<model::Backend> backend,
                                               std::shared_ptr<const TokenDecoder> decoder) {
  FLINT_ASSIGN_OR_RETURN(
      auto core, EngineCore::create(std::move(config), std::move(backend), std::move(decoder)));
  auto engine = std::unique_ptr<Engine>(new Engine());
  engine->core_ = std::move(core);
  engine->stats_ = engine->core_->stats();
  return engine;
}

Engine::~Engine() { stop(); }

void Engine::start() {
  std::lock_guard lock(mu_);
  if (running_ || stopping_) return;
  running_ = true;
  thread_ = std::thread([this] { loop(); });
}

void Engine::stop() {
  {
    std::lock_guard lock(mu_);
    if (!running_) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::lock_guard lock(mu_);
  running_ = false;
}

Status Engine::add_request(Request request, Callback callback) {
  std::lock_guard lock(mu_);
  if (!running_ || stopping_) return Error{ErrorCode::kUnavailable, "engine is not running"};
  if (core_->config().max_num_waiting > 0 &&
      stats_.num_waiting + static_cast<int>(pending_.size()) >= core_->config().max_num_waiting) {
    return Error{ErrorCode::kUnavailable, fmt::format("the waiting queue is full ({} requests)",
                                                      core_->config().max_num_waiting)};
  }
  // validate() reads only configuration fixed at create(); live ids are tracked here.
  FLINT_TRY(core_->validate(request));
  if (!live_ids_.insert(request.request_id).second)
    return Error{ErrorCode::kInvalidArgument,
                 fmt::format("request id '{}' is already in use", request.request_id)};
  pending_.push_back(Pending{std::move(request), std::move(callback)});
  cv_.notify_all();
  return ok();
}

Result<std::shared_ptr<OutputStream>> Engine::add_request(Request request) {
  auto stream = std::make_shared<OutputStream>();
  FLINT_TRY(add_request(std::move(request),
                        [stream](RequestOutput out) { stream->push(std::move(out)); }));
  return stream;
}

void Engine::abort(const std::string& request_id) {
  {
    std::lock_guard lock(mu_);
    pending_aborts_.push_back(request_id);
  }
  cv_.notify_all();
}

EngineStats Engine::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

LatencySamples Engine::take_latency_samples() {
  std::lock_guard lock(mu_);
  return std::exchange(samples_, LatencySamples{});
}

const EngineConfig& Engine::config() const { return core_->config(); }
const model::FlintConfig& Engine::model_config() const { return core_->model_config(); }

void Engine::loop() {
  for (;;) {
    std::vector<Pending> adds;
    std::vector<std::string> aborts;
    bool stopping;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] {
        return stopping_ || !pending_.empty() || !pending_aborts_.empty() || core_->has_work();
      });
      adds.swap(pending_);
      aborts.swap(pending_aborts_);
      stopping = stopping_;
    }
    for (Pending& p : adds) {
      const std::string id = p.request.request_id;
      Callback cb = std::move(p.callback);
      auto sink = [this, id, cb](RequestOutput out) {
        if (out.finished) {
          absorb_samples();  // the core recorded this request's e2e sample just before
          std::lock_guard lock(mu_);
          live_ids_.erase(id);
        }
        if (cb) cb(std::move(out));
      };
      Status st = core_->add_request(std::move(p.request), sink);
      if (!st) {  // raced with a config-independent check; report it as a failed request
        RequestOutput out;
        out.request_id = id;
        out.finished = true;
        out.error = st.error();
        sink(std::move(out));
      }
    }
    for (const std::string& id : aborts) core_->abort(id);
    if (stopping) {
      core_->abort_all();
      break;
    }
    core_->step();
    absorb_samples();
    std::lock_guard lock(mu_);
    stats_ = core_->stats();
    stats_.num_waiting += static_cast<int>(pending_.size());
  }
  std::lock_guard lock(mu_);
  stats_ = core_->stats();
}

void Engine::absorb_samples() {
  LatencySamples fresh = core_->take_latency_samples();
  std::lock_guard lock(mu_);
  auto append = [](auto& to, auto& from) {
    if (to.size() > 100000) to.erase(to.begin(), to.begin() + static_cast<long>(to.size() / 10));
    to.insert(to.end(), from.begin(), from.end());
  };
  append(samples_.ttft_s, fresh.ttft_s);
  append(samples_.itl_s, fresh.itl_s);
  append(samples_.e2e_s, fresh.e2e_s);
  append(samples_.prompt_tokens, fresh.prompt_tokens);
  append(samples_.generation_tokens, fresh.generation_tokens);
}

}  // namespace flint::engine
