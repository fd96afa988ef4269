// HF cache layout: paths, refs, snapshot links and .no_exist markers (see hf_cache.h).
#include "hub/hf_cache.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

namespace flint::hub {
namespace fs = std::filesystem;
namespace {

std::string getenv_str(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

bool is_true(const std::string& v) {
  std::string s = v;
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s == "1" || s == "on" || s == "yes" || s == "true";
}

std::string trim(std::string s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return {};
  const auto e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

bool is_hex40(const std::string& s) {
  return s.size() == 40 && std::all_of(s.begin(), s.end(), [](unsigned char c) {
           return std::isdigit(c) || (c >= 'a' && c <= 'f');
         });
}

// Repo id characters as the Hub allows them: letters, digits, '-', '_', '.'.
bool valid_name_part(const std::string& s) {
  if (s.empty() || s.size() > 96 || s.front() == '.' || s.front() == '-') return false;
  if (s.find("..") != std::string::npos) return false;
  return std::all_of(s.begin(), s.end(), [](unsigned char c) {
    return std::isalnum(c) || c == '-' || c == '_' || c == '.';
  });
}

}  // namespace

Result<RepoRef> parse_repo_ref(const std::string& spec) {
  RepoRef ref;
  std::string rest = spec;
  // The tag follows the last ':' after the repo id (a revision never contains ':').
  if (const auto colon = rest.rfind(':'); colon != std::string::npos) {
    ref.tag = rest.substr(colon + 1);
    rest = rest.substr(0, colon);
    if (ref.tag.empty())
      return make_error(ErrorCode::kInvalidArgument, "'{}': empty tag after ':'", spec);
  }
  if (const auto at = rest.find('@'); at != std::string::npos) {
    ref.revision = rest.substr(at + 1);
    rest = rest.substr(0, at);
    if (ref.revision.empty())
      return make_error(ErrorCode::kInvalidArgument, "'{}': empty revision after '@'", spec);
  }
  const auto slash = rest.find('/');
  if (slash == std::string::npos || rest.find('/', slash + 1) != std::string::npos ||
      !valid_name_part(rest.substr(0, slash)) || !valid_name_part(rest.substr(slash + 1))) {
    return make_error(ErrorCode::kInvalidArgument,
                      "'{}' is neither an existing local path nor a Hugging Face repo id "
                      "(org/name[@revision][:TAG])",
                      spec);
  }
  ref.repo_id = rest;
  return ref;
}

bool looks_like_repo_ref(const std::string& spec) {
  std::error_code ec;
  if (fs::exists(spec, ec)) return false;
  if (spec.empty() || spec.front() == '/' || spec.front() == '.' || spec.front() == '~')
    return false;
  return parse_repo_ref(spec).has_value();
}

HubSettings HubSettings::from_env() {
  HubSettings s;
  std::string home = getenv_str("HF_HOME");
  if (home.empty()) {
    std::string xdg = getenv_str("XDG_CACHE_HOME");
    if (xdg.empty()) xdg = getenv_str("HOME") + "/.cache";
    home = xdg + "/huggingface";
  }
  s.cache_dir = getenv_str("HF_HUB_CACHE");
  if (s.cache_dir.empty()) s.cache_dir = getenv_str("HUGGINGFACE_HUB_CACHE");
  if (s.cache_dir.empty()) s.cache_dir = home + "/hub";
  s.endpoint = getenv_str("HF_ENDPOINT");
  if (s.endpoint.empty()) s.endpoint = "https://huggingface.co";
  while (!s.endpoint.empty() && s.endpoint.back() == '/') s.endpoint.pop_back();
  s.token = trim(getenv_str("HF_TOKEN"));
  if (s.token.empty()) {
    std::string path = getenv_str("HF_TOKEN_PATH");
    if (path.empty()) path = home + "/token";
    std::ifstream in(path);
    if (in) {
      std::stringstream ss;
      ss << in.rdbuf();
      s.token = trim(ss.str());
    }
  }
  s.offline = is_true(getenv_str("HF_HUB_OFFLINE")) || is_true(getenv_str("TRANSFORMERS_OFFLINE"));
  return s;
}

RepoCache::RepoCache(std::string cache_dir, const std::string& repo_id) {
  std::string folder = "models--" + repo_id;
  for (size_t pos = 0; (pos = folder.find('/', pos)) != std::string::npos;)
    folder.replace(pos, 1, "--");
  root_ = std::move(cache_dir) + "/" + folder;
}

std::string RepoCache::blob_path(const std::string& etag) const { return root_ + "/blobs/" + etag; }

std::string RepoCache::snapshot_dir(const std::string& commit) const {
  return root_ + "/snapshots/" + commit;
}

std::optional<std::string> RepoCache::commit_for(const std::string& revision) const {
  if (is_hex40(revision)) return revision;
  std::ifstream in(root_ + "/refs/" + revision);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  std::string commit = trim(ss.str());
  if (commit.empty()) return std::nullopt;
  return commit;
}

std::vector<std::string> RepoCache::snapshot_files(const std::string& commit) const {
  std::vector<std::string> out;
  std::error_code ec;
  const fs::path dir = snapshot_dir(commit);
  if (!fs::is_directory(dir, ec)) return out;
  for (auto it = fs::recursive_directory_iterator(dir, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    std::error_code ec2;
    if (fs::is_regular_file(it->path(), ec2))  // follows the symlink: dangling links don't count
      out.push_back(it->path().lexically_relative(dir).generic_string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool RepoCache::is_known_missing(const std::string& commit, const std::string& path) const {
  std::error_code ec;
  return fs::is_regular_file(root_ + "/.no_exist/" + commit + "/" + path, ec);
}

Status RepoCache::write_ref(const std::string& revision, const std::string& commit) const {
  if (revision == commit) return ok();
  std::error_code ec;
  const fs::path ref = root_ + "/refs/" + revision;
  fs::create_directories(ref.parent_path(), ec);
  std::ofstream out(ref, std::ios::trunc);
  out << commit;
  if (!out) return make_error(ErrorCode::kIo, "hub: cannot write {}", ref.string());
  return ok();
}

Status RepoCache::link_snapshot(const std::string& commit, const std::string& path,
                                const std::string& etag) const {
  std::error_code ec;
  const fs::path link = snapshot_dir(commit) + "/" + path;
  fs::create_directories(link.parent_path(), ec);
  if (ec)
    return make_error(ErrorCode::kIo, "hub: cannot create {}: {}", link.parent_path().string(),
                      ec.message());
  const fs::path target = fs::relative(blob_path(etag), link.parent_path(), ec);
  if (ec)
    return make_error(ErrorCode::kIo, "hub: cannot relate {} to {}", blob_path(etag),
                      link.string());
  fs::remove(link, ec);
  fs::create_symlink(target, link, ec);
  if (ec) return make_error(ErrorCode::kIo, "hub: cannot link {}: {}", link.string(), ec.message());
  return ok();
}

Status RepoCache::mark_missing(const std::string& commit, const std::string& path) const {
  std::error_code ec;
  const fs::path marker = root_ + "/.no_exist/" + commit + "/" + path;
  fs::create_directories(marker.parent_path(), ec);
  std::ofstream out(marker);
  if (!out) return make_error(ErrorCode::kIo, "hub: cannot write {}", marker.string());
  return ok();
}

std::string normalize_etag(std::string etag) {
  etag = trim(etag);
  if (etag.rfind("W/", 0) == 0) etag = etag.substr(2);
  while (!etag.empty() && etag.front() == '"') etag.erase(etag.begin());
  while (!etag.empty() && etag.back() == '"') etag.pop_back();
  return etag;
}

}  // namespace flint::hub
