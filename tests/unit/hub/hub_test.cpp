// Hub pieces that need no network: digests (against values from Python's hashlib), repo
// references, file selection for a repo listing, and etag normalisation.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "hub/hf_cache.h"
#include "hub/resolve.h"
#include "hub/sha.h"

namespace flint::hub {
namespace {

TEST(Sha256, MatchesKnownDigests) {
  // hashlib.sha256(b"").hexdigest(), (b"abc"), and a 1,000,000-byte 'a' run (FIPS 180-2 vector).
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, SplitUpdatesEqualOneUpdate) {
  std::string data;
  for (int i = 0; i < 1000; ++i) data += static_cast<char>(i * 7);
  for (size_t cut : {0u, 1u, 55u, 56u, 63u, 64u, 65u, 999u}) {
    Sha256 h;
    h.update(data.data(), cut);
    h.update(data.data() + cut, data.size() - cut);
    EXPECT_EQ(h.hex_digest(), sha256_hex(data)) << "cut=" << cut;
  }
}

TEST(GitBlobSha1, MatchesGit) {
  // `git hash-object` of an empty file and of "hello\n".
  EXPECT_EQ(git_blob_sha1_hex(""), "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391");
  EXPECT_EQ(git_blob_sha1_hex("hello\n"), "ce013625030ba8dba906f756967f9e9ca394464a");
}

TEST(RepoRef, ParsesRevisionAndTag) {
  auto r = parse_repo_ref("RecursiveSI/flint-nvfp4-gguf:NVFP4");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->repo_id, "RecursiveSI/flint-nvfp4-gguf");
  EXPECT_EQ(r->revision, "main");
  EXPECT_EQ(r->tag, "NVFP4");
  r = parse_repo_ref("org/name@v1.2:Q4_1");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->repo_id, "org/name");
  EXPECT_EQ(r->revision, "v1.2");
  EXPECT_EQ(r->tag, "Q4_1");
}

TEST(RepoRef, RejectsMalformedIds) {
  for (const char* bad : {"name", "a/b/c", "/abs/path", "org/", "/name", "org/na me", "org/x@",
                          "org/x:", "../etc", "org/..", "org/.hidden"}) {
    EXPECT_FALSE(parse_repo_ref(bad)) << bad;
  }
}

TEST(SelectFiles, SafetensorsRepoTakesConfigWeightsAndTokenizer) {
  const std::vector<std::string> files = {"README.md",
                                          "config.json",
                                          "generation_config.json",
                                          "model.safetensors",
                                          "tokenizer.json",
                                          "tokenizer_config.json",
                                          "original/consolidated.safetensors"};
  auto got = select_files(files, Need::kModel, "");
  ASSERT_TRUE(got);
  EXPECT_EQ(*got,
            (std::vector<std::string>{"config.json", "model.safetensors", "generation_config.json",
                                      "tokenizer.json", "tokenizer_config.json"}));
  got = select_files(files, Need::kTokenizer, "");
  ASSERT_TRUE(got);
  EXPECT_EQ(*got, (std::vector<std::string>{"tokenizer.json", "tokenizer_config.json"}));
}

TEST(SelectFiles, GgufTagsPickOneSet) {
  const std::vector<std::string> files = {"flint-NVFP4.gguf", "flint-Q4_1.gguf",
                                          "big/flint-BF16-00001-of-00002.gguf",
                                          "big/flint-BF16-00002-of-00002.gguf"};
  auto got = select_files(files, Need::kModel, "nvfp4");
  ASSERT_TRUE(got);
  EXPECT_EQ(*got, std::vector<std::string>{"flint-NVFP4.gguf"});
  got = select_files(files, Need::kModel, "BF16");
  ASSERT_TRUE(got);
  EXPECT_EQ(got->size(), 2u);
  auto ambiguous = select_files(files, Need::kModel, "");
  ASSERT_FALSE(ambiguous);
  EXPECT_NE(ambiguous.error().message.find("flint-Q4_1.gguf"), std::string::npos);
  // "NVFP4" must not match inside another token.
  EXPECT_FALSE(select_files({"flint-NVFP4X.gguf"}, Need::kModel, "NVFP4"));
}

TEST(NormalizeEtag, DropsWeakPrefixAndQuotes) {
  EXPECT_EQ(normalize_etag("W/\"abc\""), "abc");
  EXPECT_EQ(normalize_etag("\"abc\""), "abc");
  EXPECT_EQ(normalize_etag("abc"), "abc");
}

TEST(RepoCache, FolderNamesFollowHuggingFaceHub) {
  RepoCache c("/cache", "org/name");
  EXPECT_EQ(c.root(), "/cache/models--org--name");
  EXPECT_EQ(c.snapshot_dir("abc"), "/cache/models--org--name/snapshots/abc");
  EXPECT_EQ(c.blob_path("e1"), "/cache/models--org--name/blobs/e1");
}

}  // namespace
}  // namespace flint::hub
