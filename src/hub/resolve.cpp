// Resolution of model arguments: local paths, the HF cache, and downloads (see resolve.h).
#include "hub/resolve.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "hub/http_client.h"
#include "hub/sha.h"

namespace flint::hub {
namespace fs = std::filesystem;
namespace {

const char* const kConfigFiles[] = {"config.json", "generation_config.json"};
const char* const kTokenizerFiles[] = {"tokenizer.json", "tokenizer_config.json",
                                       "special_tokens_map.json", "chat_template.jinja"};

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

bool is_root_file(const std::string& f) { return f.find('/') == std::string::npos; }

// "name-00001-of-00003.gguf" -> "name" and 3; other names -> the name without .gguf and 1.
std::pair<std::string, int> gguf_set(const std::string& file) {
  static const std::regex kShard(R"((.*)-(\d{5})-of-(\d{5})\.gguf)");
  std::smatch m;
  if (std::regex_match(file, m, kShard)) return {m[1].str(), std::stoi(m[3].str())};
  return {file.substr(0, file.size() - 5), 1};
}

// Whether `tag` names this GGUF: a path component equal to it, or a name token (split on - _ . /)
// equal to it, case-insensitively.
bool gguf_matches_tag(const std::string& file, const std::string& tag) {
  const std::string f = lower(file.substr(0, file.size() - 5));
  const std::string t = lower(tag);
  if (ends_with(f, t) || f.find(t + "/") != std::string::npos) {
    const size_t pos = f.rfind(t);
    const bool left_ok = pos == 0 || std::string("-_./").find(f[pos - 1]) != std::string::npos;
    const size_t end = pos + t.size();
    const bool right_ok = end == f.size() || std::string("-_./").find(f[end]) != std::string::npos;
    if (left_ok && right_ok) return true;
  }
  size_t start = 0;
  while (start <= f.size()) {
    size_t end = f.find_first_of("-_./", start);
    if (end == std::string::npos) end = f.size();
    if (f.compare(start, end - start, t) == 0 && end - start == t.size()) return true;
    start = end + 1;
  }
  return false;
}

Result<std::vector<std::string>> pick_gguf(const std::vector<std::string>& files,
                                           const std::string& tag) {
  std::map<std::string, std::vector<std::string>> sets;  // set name -> shard files
  for (const auto& f : files)
    if (ends_with(lower(f), ".gguf") && (tag.empty() || gguf_matches_tag(f, tag)))
      sets[gguf_set(f).first].push_back(f);
  std::vector<std::string> all;
  for (const auto& f : files)
    if (ends_with(lower(f), ".gguf")) all.push_back(f);
  auto listing = [&] {
    std::string s;
    for (const auto& f : all) s += (s.empty() ? "" : ", ") + f;
    return s.empty() ? std::string("none") : s;
  };
  if (sets.empty()) {
    return make_error(ErrorCode::kNotFound, "no GGUF file matches tag '{}'; the repo has: {}", tag,
                      listing());
  }
  if (sets.size() > 1) {
    return make_error(ErrorCode::kInvalidArgument,
                      "{} GGUF files match{}; pick one with org/name:TAG. The repo has: {}",
                      sets.size(), tag.empty() ? "" : " tag '" + tag + "'", listing());
  }
  auto chosen = sets.begin()->second;
  std::sort(chosen.begin(), chosen.end());
  return chosen;
}

// Shards listed by a safetensors index.
Result<std::vector<std::string>> index_shards(const std::string& index_path,
                                              const std::string& dir_prefix) {
  std::ifstream in(index_path);
  if (!in) return make_error(ErrorCode::kNotFound, "cannot read {}", index_path);
  std::set<std::string> shards;
  try {
    const auto j = nlohmann::json::parse(in);
    for (const auto& [name, file] : j.at("weight_map").items())
      shards.insert(dir_prefix + file.get<std::string>());
  } catch (const std::exception& e) {
    return make_error(ErrorCode::kInvalidFile, "{}: bad safetensors index: {}", index_path,
                      e.what());
  }
  return std::vector<std::string>(shards.begin(), shards.end());
}

struct Plan {
  std::vector<std::string> required;
  std::vector<std::string> optional;
  std::string index;    // a safetensors index to fetch first, then add its shards
  std::string primary;  // the file to return (first GGUF shard), or empty for the dir
};

Result<Plan> plan_files(const std::vector<std::string>& files, Need need, const std::string& tag) {
  Plan p;
  auto has = [&](const std::string& f) {
    return std::find(files.begin(), files.end(), f) != files.end();
  };
  auto add_optional = [&](const char* const* names, size_t n) {
    for (size_t i = 0; i < n; ++i)
      if (has(names[i])) p.optional.push_back(names[i]);
  };
  switch (need) {
    case Need::kConfig:
      if (!has("config.json"))
        return make_error(ErrorCode::kNotFound, "the repo has no config.json");
      p.required.push_back("config.json");
      if (has("generation_config.json")) p.optional.push_back("generation_config.json");
      return p;
    case Need::kTokenizer:
      if (!has("tokenizer.json"))
        return make_error(ErrorCode::kNotFound, "the repo has no tokenizer.json");
      p.required.push_back("tokenizer.json");
      add_optional(kTokenizerFiles + 1, 3);
      return p;
    case Need::kModel:
      break;
  }
  const bool any_gguf = std::any_of(files.begin(), files.end(), [](const std::string& f) {
    return ends_with(lower(f), ".gguf");
  });
  const bool any_st = std::any_of(files.begin(), files.end(), [](const std::string& f) {
    return ends_with(f, ".safetensors");
  });
  if (any_gguf && (!tag.empty() || !any_st)) {
    FLINT_ASSIGN_OR_RETURN(auto chosen, pick_gguf(files, tag));
    p.required = chosen;
    p.primary = chosen.front();
    add_optional(kConfigFiles, 2);
    add_optional(kTokenizerFiles, 4);
    return p;
  }
  if (!tag.empty())
    return make_error(ErrorCode::kNotFound, "tag ':{}' given but the repo has no GGUF files", tag);
  if (!has("config.json")) return make_error(ErrorCode::kNotFound, "the repo has no config.json");
  p.required.push_back("config.json");
  if (has("model.safetensors.index.json")) {
    p.index = "model.safetensors.index.json";
    p.required.push_back(p.index);
  } else if (has("model.safetensors")) {
    p.required.push_back("model.safetensors");
  } else {
    for (const auto& f : files)
      if (is_root_file(f) && ends_with(f, ".safetensors")) p.required.push_back(f);
    if (p.required.size() == 1)
      return make_error(ErrorCode::kNotFound, "the repo has neither safetensors nor GGUF weights");
  }
  add_optional(kConfigFiles + 1, 1);
  add_optional(kTokenizerFiles, 4);
  return p;
}

std::string hub_error_hint(const HttpResponse& r, const RepoRef& ref, const HubSettings& s) {
  const std::string code = r.header("x-error-code");
  if (r.status == 401 || r.status == 403) {
    return fmt::format(
        "access to {} was refused (HTTP {}){}: set HF_TOKEN to a token that can read it",
        ref.repo_id, r.status, s.token.empty() ? " and no token is set" : "");
  }
  if (r.status == 404) {
    if (code == "RevisionNotFound")
      return fmt::format("revision '{}' of {} does not exist on {}", ref.revision, ref.repo_id,
                         s.endpoint);
    if (code == "EntryNotFound")
      return fmt::format("a file of {} does not exist on {}", ref.repo_id, s.endpoint);
    return fmt::format(
        "repo {} (revision '{}') not found on {}: check the name, or set HF_TOKEN if it "
        "is private",
        ref.repo_id, ref.revision, s.endpoint);
  }
  return fmt::format("{} answered HTTP {} for {}", s.endpoint, r.status, ref.repo_id);
}

Error network_hint(const Error& e) {
  return make_error(ErrorCode::kNetwork,
                    "{}; if this machine has no network, set HF_HUB_OFFLINE=1 to "
                    "use only the local cache",
                    e.message);
}

std::vector<std::string> auth_headers(const HubSettings& s) {
  std::vector<std::string> h;
  if (!s.token.empty()) h.push_back("Authorization: Bearer " + s.token);
  return h;
}

// Checks a finished download against the etag: sha256 for LFS files, git blob sha1 otherwise.
Status verify_blob(const std::string& path, const std::string& etag, int64_t expected_size,
                   const std::string& file) {
  std::error_code ec;
  const auto size = static_cast<int64_t>(fs::file_size(path, ec));
  if (ec) return make_error(ErrorCode::kIo, "cannot stat {}", path);
  if (expected_size >= 0 && size != expected_size) {
    return make_error(ErrorCode::kNetwork, "download of {} is {} bytes, expected {}", file, size,
                      expected_size);
  }
  const bool is_sha256 = etag.size() == 64;
  const bool is_sha1 = etag.size() == 40;
  if (!is_sha256 && !is_sha1) return ok();  // an etag that is no content hash cannot be checked
  std::ifstream in(path, std::ios::binary);
  std::vector<char> buf(1 << 20);
  Sha256 h256;
  Sha1 h1;
  if (is_sha1) {
    const std::string header = "blob " + std::to_string(size) + std::string(1, '\0');
    h1.update(header.data(), header.size());
  }
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const auto n = static_cast<size_t>(in.gcount());
    if (is_sha256)
      h256.update(buf.data(), n);
    else
      h1.update(buf.data(), n);
  }
  const std::string got = is_sha256 ? h256.hex_digest() : h1.hex_digest();
  if (got != etag) {
    return make_error(ErrorCode::kNetwork, "download of {} is corrupted: {} {}, expected {}", file,
                      is_sha256 ? "sha256" : "git sha1", got, etag);
  }
  return ok();
}

class Downloader {
 public:
  Downloader(const RepoRef& ref, const ResolveOptions& opts, const RepoCache& cache,
             std::string commit)
      : ref_(ref), opts_(opts), cache_(cache), commit_(std::move(commit)) {}

  // Fetches every file not already in the snapshot, `parallel` at a time.
  Status fetch_all(const std::vector<std::string>& files) {
    std::vector<std::string> todo;
    for (const auto& f : files)
      if (!fs::is_regular_file(cache_.snapshot_dir(commit_) + "/" + f)) todo.push_back(f);
    if (todo.empty()) return ok();
    spdlog::info("hub: downloading {} file(s) of {} at {}", todo.size(), ref_.repo_id,
                 commit_.substr(0, 12));
    std::atomic<size_t> next{0};
    std::mutex mu;
    std::optional<Error> first_error;
    std::atomic<bool> done{false};
    std::thread reporter([&] { report_progress(done); });
    std::vector<std::thread> workers;
    const int n =
        std::max(1, std::min<int>(opts_.parallel_downloads, static_cast<int>(todo.size())));
    for (int w = 0; w < n; ++w) {
      workers.emplace_back([&] {
        for (size_t i; (i = next.fetch_add(1)) < todo.size();) {
          auto st = fetch_one(todo[i]);
          if (!st) {
            std::lock_guard<std::mutex> lock(mu);
            if (!first_error) first_error = st.error();
          }
        }
      });
    }
    for (auto& t : workers) t.join();
    done = true;
    reporter.join();
    if (first_error) return *first_error;
    return ok();
  }

 private:
  Status fetch_one(const std::string& file) {
    const std::string url = opts_.settings.endpoint + "/" + ref_.repo_id + "/resolve/" + commit_ +
                            "/" + url_encode(file, /*keep_slash=*/true);
    HttpRequest head{"HEAD", url, auth_headers(opts_.settings), /*follow_redirects=*/false};
    auto meta = http_request(head);
    // The Hub redirects renamed repos with a relative Location: follow those for metadata.
    for (int hops = 0; meta && meta->status >= 300 && meta->status < 400 && hops < 5; ++hops) {
      const std::string loc = meta->header("location");
      if (loc.empty() || loc.front() != '/' || !meta->header("x-linked-etag").empty()) break;
      head.url = opts_.settings.endpoint + loc;
      meta = http_request(head);
    }
    if (!meta) return network_hint(meta.error());
    if (meta->status >= 400)
      return make_error(meta->status == 404 ? ErrorCode::kNotFound : ErrorCode::kPermissionDenied,
                        "{}: {}", file, hub_error_hint(*meta, ref_, opts_.settings));
    std::string etag = normalize_etag(meta->header("x-linked-etag"));
    if (etag.empty()) etag = normalize_etag(meta->header("etag"));
    if (etag.empty())
      return make_error(ErrorCode::kNetwork, "{}: the server sent no ETag for {}", ref_.repo_id,
                        file);
    int64_t size = -1;
    std::string size_header = meta->header("x-linked-size");
    if (size_header.empty() && meta->status < 300) size_header = meta->header("content-length");
    if (!size_header.empty()) size = std::stoll(size_header);
    if (size > 0) total_bytes_ += size;

    const std::string blob = cache_.blob_path(etag);
    std::error_code ec;
    fs::create_directories(fs::path(blob).parent_path(), ec);
    if (ec)
      return make_error(ErrorCode::kIo, "cannot create {}: {}",
                        fs::path(blob).parent_path().string(), ec.message());
    if (!fs::is_regular_file(blob) ||
        (size >= 0 && static_cast<int64_t>(fs::file_size(blob)) != size)) {
      const std::string partial = blob + ".incomplete";
      Status last = ok();
      for (int attempt = 0; attempt < 4; ++attempt) {
        HttpRequest get{"GET", url, auth_headers(opts_.settings), /*follow_redirects=*/true};
        auto r = http_download(get, partial, &done_bytes_);
        if (!r) {
          if (r.error().code == ErrorCode::kIo) return r.error();
          last = network_hint(r.error());
          spdlog::warn("hub: {}: {} (attempt {}, resuming)", file, r.error().message, attempt + 1);
          continue;
        }
        if (r->status >= 400) {
          return make_error(ErrorCode::kNetwork, "{}: {}", file,
                            hub_error_hint(*r, ref_, opts_.settings));
        }
        const int64_t have = static_cast<int64_t>(fs::file_size(partial, ec));
        if (size >= 0 && have < size) {  // the connection closed early: resume
          last = make_error(ErrorCode::kNetwork, "{}: connection closed after {} of {} bytes", file,
                            have, size);
          spdlog::warn("hub: {} (attempt {}, resuming)", last.error().message, attempt + 1);
          continue;
        }
        last = verify_blob(partial, etag, size, file);
        if (!last) {
          fs::remove(partial, ec);  // never keep (or resume) corrupted bytes
          return last;
        }
        break;
      }
      if (!last) return last;
      fs::rename(partial, blob, ec);
      if (ec)
        return make_error(ErrorCode::kIo, "cannot move {} into place: {}", partial, ec.message());
    }
    return cache_.link_snapshot(commit_, file, etag);
  }

  void report_progress(const std::atomic<bool>& done) {
    const bool tty = opts_.progress_bar && ::isatty(STDERR_FILENO);
    auto last_log = std::chrono::steady_clock::now();
    const auto start = last_log;
    while (!done) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      const auto now = std::chrono::steady_clock::now();
      const double secs = std::chrono::duration<double>(now - start).count();
      const double got = static_cast<double>(done_bytes_.load());
      const double total = static_cast<double>(total_bytes_.load());
      const double rate = secs > 0 ? got / secs : 0;
      if (tty) {
        const double frac = total > 0 ? std::min(1.0, got / total) : 0;
        const int width = 30;
        const int filled = static_cast<int>(frac * width);
        fmt::print(stderr, "\r[{}{}] {:5.1f}% {:.1f}/{:.1f} MB {:.1f} MB/s ",
                   std::string(filled, '#'), std::string(width - filled, ' '), 100 * frac,
                   got / 1e6, total / 1e6, rate / 1e6);
      } else if (now - last_log > std::chrono::seconds(10)) {
        last_log = now;
        spdlog::info("hub: {:.1f} of {:.1f} MB ({:.1f} MB/s)", got / 1e6, total / 1e6, rate / 1e6);
      }
    }
    if (tty) fmt::print(stderr, "\n");
  }

  const RepoRef& ref_;
  const ResolveOptions& opts_;
  const RepoCache& cache_;
  std::string commit_;
  std::atomic<int64_t> total_bytes_{0};
  std::atomic<int64_t> done_bytes_{0};
};

std::string describe(Need need) {
  switch (need) {
    case Need::kModel:
      return "model";
    case Need::kConfig:
      return "config";
    case Need::kTokenizer:
      return "tokenizer";
  }
  return "?";
}

// Resolves from the cache alone; errors name what is missing.
Result<std::string> resolve_offline(const RepoRef& ref, Need need, const RepoCache& cache,
                                    const HubSettings& s) {
  const auto commit = cache.commit_for(ref.revision);
  if (!commit) {
    return make_error(ErrorCode::kNotFound,
                      "{} (revision '{}') is not in the HF cache at {} and HF_HUB_OFFLINE is set: "
                      "download it first or unset HF_HUB_OFFLINE",
                      ref.repo_id, ref.revision, s.cache_dir);
  }
  const auto files = cache.snapshot_files(*commit);
  auto plan = plan_files(files, need, ref.tag);
  if (!plan) {
    return plan.error().with_context(
        "offline: the cached snapshot {} of {} is incomplete for the {}", commit->substr(0, 12),
        ref.repo_id, describe(need));
  }
  std::vector<std::string> missing;
  auto have = [&](const std::string& f) {
    return std::binary_search(files.begin(), files.end(), f);
  };
  std::vector<std::string> required = plan->required;
  if (!plan->index.empty() && have(plan->index)) {
    FLINT_ASSIGN_OR_RETURN(auto shards,
                           index_shards(cache.snapshot_dir(*commit) + "/" + plan->index, ""));
    required.insert(required.end(), shards.begin(), shards.end());
  }
  if (!plan->primary.empty()) {  // a shard set must be complete
    const auto [set, count] = gguf_set(plan->primary);
    if (count > 1) {
      for (int i = 1; i <= count; ++i)
        required.push_back(fmt::format("{}-{:05d}-of-{:05d}.gguf", set, i, count));
    }
  }
  for (const auto& f : required)
    if (!have(f)) missing.push_back(f);
  if (!missing.empty()) {
    std::string list;
    for (const auto& f : missing) list += (list.empty() ? "" : ", ") + f;
    return make_error(ErrorCode::kNotFound,
                      "offline (HF_HUB_OFFLINE=1): the cached snapshot {} of {} lacks: {}",
                      commit->substr(0, 12), ref.repo_id, list);
  }
  const std::string dir = cache.snapshot_dir(*commit);
  return plan->primary.empty() ? dir : dir + "/" + plan->primary;
}

}  // namespace

Result<std::vector<std::string>> select_files(const std::vector<std::string>& repo_files, Need need,
                                              const std::string& tag) {
  FLINT_ASSIGN_OR_RETURN(auto plan, plan_files(repo_files, need, tag));
  std::vector<std::string> out = plan.required;
  out.insert(out.end(), plan.optional.begin(), plan.optional.end());
  return out;
}

Result<std::string> resolve(const std::string& spec, Need need, const ResolveOptions& opts) {
  std::error_code ec;
  if (fs::exists(spec, ec)) return spec;
  FLINT_ASSIGN_OR_RETURN(RepoRef ref, parse_repo_ref(spec));
  const HubSettings& s = opts.settings;
  RepoCache cache(s.cache_dir, ref.repo_id);
  if (s.offline) return resolve_offline(ref, need, cache, s);

  const std::string api =
      s.endpoint + "/api/models/" + ref.repo_id + "/revision/" + url_encode(ref.revision, false);
  auto info = http_request(HttpRequest{"GET", api, auth_headers(s), true});
  if (!info) return network_hint(info.error()).with_context("resolving {}", spec);
  if (info->status != 200) {
    const ErrorCode code = info->status == 404 ? ErrorCode::kNotFound
                           : (info->status == 401 || info->status == 403)
                               ? ErrorCode::kPermissionDenied
                               : ErrorCode::kNetwork;
    return make_error(code, "{}", hub_error_hint(*info, ref, s));
  }
  std::string commit;
  std::vector<std::string> files;
  try {
    const auto j = nlohmann::json::parse(info->body);
    commit = j.at("sha").get<std::string>();
    for (const auto& sib : j.at("siblings"))
      files.push_back(sib.at("rfilename").get<std::string>());
  } catch (const std::exception& e) {
    return make_error(ErrorCode::kNetwork, "{}: unexpected reply from {}: {}", ref.repo_id, api,
                      e.what());
  }
  std::sort(files.begin(), files.end());
  auto planned = plan_files(files, need, ref.tag);
  if (!planned) return planned.error().with_context("{}", spec);
  const Plan plan = std::move(planned).value();
  FLINT_TRY(cache.write_ref(ref.revision, commit));
  Downloader dl(ref, opts, cache, commit);
  std::vector<std::string> wanted = plan.required;
  wanted.insert(wanted.end(), plan.optional.begin(), plan.optional.end());
  if (!plan.index.empty()) {
    FLINT_TRY(dl.fetch_all({plan.index}));
    FLINT_ASSIGN_OR_RETURN(auto shards,
                           index_shards(cache.snapshot_dir(commit) + "/" + plan.index, ""));
    for (const auto& sh : shards) {
      if (!std::binary_search(files.begin(), files.end(), sh))
        return make_error(ErrorCode::kInvalidFile,
                          "{}: the index names {}, which the repo does not have", spec, sh);
      wanted.push_back(sh);
    }
  }
  FLINT_TRY(dl.fetch_all(wanted));
  const std::string dir = cache.snapshot_dir(commit);
  return plan.primary.empty() ? dir : dir + "/" + plan.primary;
}

}  // namespace flint::hub
