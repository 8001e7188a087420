// OMS v1.0 statements: what the format allows reads, everything else is refused before any hashing,
// resources sort as the reference implementation lists them, and ignore paths match by component.
#include "infergate/agent/signing/oms_statement.h"

#include <gtest/gtest.h>

#include "infergate/common/json.h"

namespace infergate::agent {
namespace {

Sha256Digest digest_of(const std::string& s) { return *sha256(s); }

// A valid statement as JSON: files a and b/c, or shards of 10 bytes of a 25-byte file.
Json statement(bool shards = false) {
  std::vector<OmsResource> rs;
  if (shards) {
    rs = {{"w", 0, 10, digest_of("1")}, {"w", 10, 20, digest_of("2")}, {"w", 20, 25, digest_of("3")}};
  } else {
    rs = {{"a", 0, 0, digest_of("a")}, {"b/c", 0, 0, digest_of("c")}};
  }
  OmsStatement s;
  s.model_name = "m";
  s.serialization.method = shards ? OmsMethod::kShards : OmsMethod::kFiles;
  s.serialization.shard_size = shards ? 10 : 0;
  s.serialization.ignore_paths = {".git", "model.sig"};
  s.resources = rs;
  s.root_digest = oms_root_digest(rs);
  return Json::parse(serialize_oms_statement(s));
}

std::string outcome(const Json& j) {
  auto s = parse_oms_statement(j.dump());
  return s.ok() ? "accepted" : s.error().reason();
}

// Recomputes the subject digest after an edit, so that only the edited rule is tested.
void rehash(Json& j) {
  Sha256 h;
  for (const auto& r : j["predicate"]["resources"]) {
    auto d = Sha256Digest::from_hex(r["digest"].get<std::string>());
    if (d.ok()) h.update(d->bytes.data(), d->bytes.size());
  }
  j["subject"][0]["digest"]["sha256"] = h.finish()->hex();
}

TEST(OmsStatement, ReadsFilesAndShardsStatements) {
  auto f = parse_oms_statement(statement().dump());
  ASSERT_TRUE(f.ok()) << f.error().to_string();
  EXPECT_EQ(f->model_name, "m");
  EXPECT_EQ(f->resources.size(), 2u);
  EXPECT_EQ(f->serialization.ignore_paths, (std::vector<std::string>{".git", "model.sig"}));
  auto s = parse_oms_statement(statement(true).dump());
  ASSERT_TRUE(s.ok()) << s.error().to_string();
  EXPECT_EQ(s->serialization.shard_size, 10u);
  EXPECT_EQ(s->resources[2].start, 20u);
  EXPECT_EQ(s->resources[2].end, 25u);
}

TEST(OmsStatement, AcceptsAShardSizeWrittenAsAnIntegralDouble) {
  Json j = statement(true);
  j["predicate"]["serialization"]["shard_size"] = 10.0;
  EXPECT_EQ(outcome(j), "accepted");
  j["predicate"]["serialization"]["shard_size"] = 10.5;
  EXPECT_EQ(outcome(j), "StatementInvalid");
}

TEST(OmsStatement, RefusesWhatTheFormatDoesNotDefine) {
  struct Case {
    const char* name;
    bool shards;
    std::function<void(Json&)> edit;
    const char* reason;
  };
  std::vector<Case> cases = {
      {"another predicate type", false,
       [](Json& j) { j["predicateType"] = "https://model_signing/Digests/v0.1"; }, "StatementInvalid"},
      {"two subjects", false, [](Json& j) { j["subject"].push_back(j["subject"][0]); }, "StatementInvalid"},
      {"blake2b", false, [](Json& j) { j["predicate"]["serialization"]["hash_type"] = "blake2b"; },
       "StatementInvalid"},
      {"no allow_symlinks", false, [](Json& j) { j["predicate"]["serialization"].erase("allow_symlinks"); },
       "StatementInvalid"},
      {"another method", false, [](Json& j) { j["predicate"]["serialization"]["method"] = "tensors"; },
       "StatementInvalid"},
      {"a sharded algorithm in files", false,
       [](Json& j) { j["predicate"]["resources"][0]["algorithm"] = "sha256-sharded-10"; },
       "StatementInvalid"},
      {"a 63-digit digest", false,
       [](Json& j) {
         j["predicate"]["resources"][0]["digest"] =
             j["predicate"]["resources"][0]["digest"].get<std::string>().substr(1);
       },
       "StatementInvalid"},
      {"an absolute path", false, [](Json& j) { j["predicate"]["resources"][0]["name"] = "/etc/passwd"; },
       "UnsafePath"},
      {"a dot-dot path", false, [](Json& j) { j["predicate"]["resources"][0]["name"] = "a/../../b"; },
       "UnsafePath"},
      {"a ./ path", false, [](Json& j) { j["predicate"]["resources"][0]["name"] = "./a"; }, "UnsafePath"},
      {"the same file twice", false,
       [](Json& j) { j["predicate"]["resources"][1] = j["predicate"]["resources"][0]; }, "DuplicateEntry"},
      {"another subject digest", false,
       [](Json& j) { j["subject"][0]["digest"]["sha256"] = std::string(64, '0'); }, "StatementInvalid"},
      {"a shard size that does not match the algorithm", true,
       [](Json& j) { j["predicate"]["serialization"]["shard_size"] = 11; }, "StatementInvalid"},
      {"a shard name without offsets", true, [](Json& j) { j["predicate"]["resources"][0]["name"] = "w"; },
       "StatementInvalid"},
      {"a shard longer than shard_size", true,
       [](Json& j) { j["predicate"]["resources"][2]["name"] = "w:20:31"; }, "StatementInvalid"},
      {"a shard with a leading zero", true,
       [](Json& j) { j["predicate"]["resources"][1]["name"] = "w:010:20"; }, "StatementInvalid"},
      {"a gap between shards", true, [](Json& j) { j["predicate"]["resources"].erase(1); },
       "StatementInvalid"},
      {"a short middle shard", true, [](Json& j) { j["predicate"]["resources"][1]["name"] = "w:10:15"; },
       "StatementInvalid"},
      {"the same shard twice", true,
       [](Json& j) { j["predicate"]["resources"][1] = j["predicate"]["resources"][0]; }, "DuplicateEntry"},
  };
  for (const auto& c : cases) {
    Json j = statement(c.shards);
    c.edit(j);
    if (std::string(c.name) != "another subject digest") rehash(j);
    EXPECT_EQ(outcome(j), c.reason) << c.name;
  }
  EXPECT_EQ(parse_oms_statement("{\"_type\":1,\"_type\":2}").error().reason(), "StatementInvalid");
  EXPECT_EQ(parse_oms_statement("not json").error().reason(), "StatementInvalid");
}

TEST(OmsStatement, IgnoresPredicateFieldsV1DoesNotDefine) {
  Json j = statement();
  j["predicate"]["model_card"] = {{"license", "apache-2.0"}};
  EXPECT_EQ(outcome(j), "accepted");
}

TEST(OmsStatement, ReadsShardPathsThatHoldAColon) {
  Json j = statement(true);
  for (auto& r : j["predicate"]["resources"]) {
    std::string n = r["name"];
    r["name"] = "a:b/" + n;
  }
  rehash(j);
  auto s = parse_oms_statement(j.dump());
  ASSERT_TRUE(s.ok()) << s.error().to_string();
  EXPECT_EQ(s->resources[0].path, "a:b/w");
}

TEST(OmsStatement, SortsResourcesComponentByComponentAsTheReferenceDoes) {
  // Byte order would put "a-b" before "a/b" ('-' < '/'); component order puts "a" before "a-b".
  std::vector<OmsResource> rs = {{"a-b", 0, 0, {}}, {"a/b", 0, 0, {}}, {"a/a", 0, 0, {}},
                                 {"B", 0, 0, {}},   {"w", 10, 20, {}}, {"w", 0, 10, {}}};
  sort_oms_resources(rs);
  std::vector<std::string> got;
  for (const auto& r : rs) got.push_back(r.path + "@" + std::to_string(r.start));
  EXPECT_EQ(got, (std::vector<std::string>{"B@0", "a/a@0", "a/b@0", "a-b@0", "w@0", "w@10"}));
}

TEST(OmsStatement, IgnorePathsMatchWholeComponentsAndNeverLeaveTheModel) {
  std::vector<std::string> ign = {".git", "notes/", "./docs//old", "/etc", "../x", "a/../b"};
  EXPECT_TRUE(oms_ignored(".git", ign));
  EXPECT_TRUE(oms_ignored(".git/objects/ab", ign));
  EXPECT_TRUE(oms_ignored("notes/readme.txt", ign));
  EXPECT_TRUE(oms_ignored("docs/old/page.md", ign));
  EXPECT_FALSE(oms_ignored(".gitignore", ign));
  EXPECT_FALSE(oms_ignored("docs/older", ign));
  EXPECT_FALSE(oms_ignored("etc", ign));
  EXPECT_FALSE(oms_ignored("b", ign));
  EXPECT_TRUE(oms_ignored("anything", {"."}));  // the model root itself: everything
}

}  // namespace
}  // namespace infergate::agent
