// The Hugging Face cache exactly as huggingface_hub lays it out, so a cache filled by Python tools
// is used as it is, and what we download is used by them:
//   <cache>/models--<org>--<name>/blobs/<etag>               file contents, named by etag
//   <cache>/models--<org>--<name>/refs/<revision>            the commit a branch or tag points to
//   <cache>/models--<org>--<name>/snapshots/<commit>/<path>  relative symlinks into blobs/
//   <cache>/models--<org>--<name>/.no_exist/<commit>/<path>  a file known not to exist
// Test partner: tests/python/hub/test_hub_cache.py (against the real huggingface_hub package).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/result.h"

namespace flint::hub {

// Where a model argument points: `org/name`, `org/name@revision`, `org/name:TAG` (pick the GGUF
// whose name matches TAG) or `org/name@revision:TAG`.
struct RepoRef {
  std::string repo_id;
  std::string revision = "main";
  std::string tag;
};

// Parses a repo reference; an error says why the text is not one.
Result<RepoRef> parse_repo_ref(const std::string& spec);
// True when `spec` is shaped like a repo id and is not an existing local path.
bool looks_like_repo_ref(const std::string& spec);

// Environment-derived settings, as huggingface_hub reads them.
struct HubSettings {
  std::string cache_dir;  // HF_HUB_CACHE > HUGGINGFACE_HUB_CACHE > HF_HOME/hub >
                          // XDG_CACHE_HOME/huggingface/hub
  std::string endpoint;   // HF_ENDPOINT or https://huggingface.co
  std::string token;      // HF_TOKEN, else the token file (HF_TOKEN_PATH or HF_HOME/token)
  bool offline = false;   // HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE
  static HubSettings from_env();
};

class RepoCache {
 public:
  RepoCache(std::string cache_dir, const std::string& repo_id);

  const std::string& root() const { return root_; }
  std::string blob_path(const std::string& etag) const;
  std::string snapshot_dir(const std::string& commit) const;
  // The commit `revision` names: a 40-hex revision is itself; otherwise refs/<revision>.
  std::optional<std::string> commit_for(const std::string& revision) const;
  // Files present in a snapshot (relative paths, sorted), following symlinks that resolve.
  std::vector<std::string> snapshot_files(const std::string& commit) const;
  bool is_known_missing(const std::string& commit, const std::string& path) const;

  Status write_ref(const std::string& revision, const std::string& commit) const;
  // Links snapshots/<commit>/<path> to blobs/<etag> with a relative symlink.
  Status link_snapshot(const std::string& commit, const std::string& path,
                       const std::string& etag) const;
  Status mark_missing(const std::string& commit, const std::string& path) const;

 private:
  std::string root_;
};

// Normalises an ETag header as huggingface_hub does (drops W/ and quotes).
std::string normalize_etag(std::string etag);

}  // namespace flint::hub
