// The local model store: YAML files validated like the API server's objects, per-file errors,
// generations, conflicts, status files that survive a restart.
#include "infergate/operator/local/model_store.h"

#include <gtest/gtest.h>

#include "infergate/common/fs.h"
#include "infergate/operator/api/yaml.h"

namespace infergate::op::local {
namespace {

namespace fs = std::filesystem;

std::string model_yaml(const std::string& name, const std::string& kv = "fp16", int replicas = 1) {
  return "apiVersion: serving.infergate.dev/v1alpha1\n"
         "kind: InferenceModel\n"
         "metadata:\n"
         "  name: " +
         name +
         "\n"
         "spec:\n"
         "  replicas: " +
         std::to_string(replicas) +
         "\n"
         "  artifact:\n"
         "    volume: {persistentVolumeClaim: {claimName: models}}\n"
         "    path: tiny/fp16\n"
         "    trust: {publicKeySecretRef: {name: signing-key}, expectName: tiny}\n"
         "  serving:\n"
         "    weightFormat: fp16\n"
         "    kvCacheDtype: " +
         kv +
         "\n"
         "    maxContextLength: 256\n"
         "    maxConcurrency: 4\n";
}

struct Dirs {
  TempDir root = std::move(*TempDir::create("store"));
  fs::path manifests() const { return root.path() / "manifests"; }
  fs::path state() const { return root.path() / "state"; }
  Dirs() {
    fs::create_directories(manifests());
    fs::create_directories(state());
  }
  void write(const std::string& file, const std::string& text) const {
    ASSERT_TRUE(write_file_atomic(manifests() / file, text).ok());
  }
};

TEST(ModelStore, ReadsModelsFromYamlFilesWithTheDefaultNamespace) {
  Dirs d;
  d.write("a.yaml", model_yaml("alpha"));
  d.write("b.yml", model_yaml("beta") + "---\n" + model_yaml("gamma"));
  d.write("notes.txt", "ignored");
  LocalModelStore store(d.manifests(), d.state());
  ASSERT_TRUE(store.load_state().ok());
  auto changed = store.scan();
  EXPECT_EQ(changed, (std::vector<std::string>{"default/alpha", "default/beta", "default/gamma"}));
  auto o = store.get("default", "beta");
  ASSERT_TRUE(o.ok() && o->has_value());
  EXPECT_EQ((**o)["metadata"]["generation"], 1);
  EXPECT_FALSE((**o)["metadata"]["uid"].get<std::string>().empty());
  EXPECT_TRUE(store.errors().empty());
  // Nothing changed: nothing to reconcile.
  EXPECT_TRUE(store.scan().empty());
}

TEST(ModelStore, AMalformedFileGetsAClearErrorAndTheOthersKeepWorking) {
  Dirs d;
  d.write("good.yaml", model_yaml("good"));
  d.write("bad.yaml", model_yaml("bad", "int3"));
  d.write("broken.yaml", "spec: [unclosed\n");
  LocalModelStore store(d.manifests(), d.state());
  ASSERT_TRUE(store.load_state().ok());
  auto changed = store.scan();
  EXPECT_EQ(changed, (std::vector<std::string>{"default/good"}));
  auto errors = store.errors();
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_EQ(errors[0].file, "bad.yaml");
  EXPECT_NE(errors[0].message.find("spec.serving.kvCacheDtype"), std::string::npos) << errors[0].message;
  EXPECT_NE(errors[0].message.find("int3"), std::string::npos) << errors[0].message;
  EXPECT_EQ(errors[1].file, "broken.yaml");
  EXPECT_EQ(errors[1].reason, "YamlError");
  EXPECT_FALSE(store.get("default", "bad")->has_value());
}

TEST(ModelStore, AFileThatBreaksKeepsTheModelItHeldAsItWas) {
  Dirs d;
  d.write("m.yaml", model_yaml("m"));
  LocalModelStore store(d.manifests(), d.state());
  ASSERT_TRUE(store.load_state().ok());
  (void)store.scan();
  d.write("m.yaml", model_yaml("m", "int9"));
  EXPECT_TRUE(store.scan().empty());
  ASSERT_EQ(store.errors().size(), 1u);
  auto o = store.get("default", "m");
  ASSERT_TRUE(o->has_value());
  EXPECT_EQ((**o)["spec"]["serving"]["kvCacheDtype"], "fp16");
  // Fixed again: the error goes, the change applies.
  d.write("m.yaml", model_yaml("m", "int8"));
  EXPECT_EQ(store.scan(), (std::vector<std::string>{"default/m"}));
  EXPECT_TRUE(store.errors().empty());
  EXPECT_EQ((**store.get("default", "m"))["spec"]["serving"]["kvCacheDtype"], "int8");
}

TEST(ModelStore, TheSameModelInTwoFilesIsAnErrorForTheLaterFile) {
  Dirs d;
  d.write("a.yaml", model_yaml("m"));
  d.write("b.yaml", model_yaml("m", "int8"));
  LocalModelStore store(d.manifests(), d.state());
  ASSERT_TRUE(store.load_state().ok());
  (void)store.scan();
  ASSERT_EQ(store.errors().size(), 1u);
  EXPECT_EQ(store.errors()[0].file, "b.yaml");
  EXPECT_EQ(store.errors()[0].reason, "DuplicateModel");
  EXPECT_EQ((**store.get("default", "m"))["spec"]["serving"]["kvCacheDtype"], "fp16");
}

TEST(ModelStore, ASpecChangeMovesTheGenerationAndAStatusWriteDoesNot) {
  Dirs d;
  d.write("m.yaml", model_yaml("m"));
  LocalModelStore store(d.manifests(), d.state());
  ASSERT_TRUE(store.load_state().ok());
  (void)store.scan();
  Json base = **store.get("default", "m");
  auto written = store.write_status(base, {{"observedGeneration", 1}});
  ASSERT_TRUE(written.ok()) << written.error().to_string();
  EXPECT_EQ((*written)["metadata"]["generation"], 1);
  d.write("m.yaml", model_yaml("m", "int8"));
  (void)store.scan();
  EXPECT_EQ((**store.get("default", "m"))["metadata"]["generation"], 2);
  // The status written before the spec change is kept.
  EXPECT_EQ((**store.get("default", "m"))["status"]["observedGeneration"], 1);
}

TEST(ModelStore, AStatusWriteAgainstAStaleBaseConflicts) {
  Dirs d;
  d.write("m.yaml", model_yaml("m"));
  LocalModelStore store(d.manifests(), d.state());
  ASSERT_TRUE(store.load_state().ok());
  (void)store.scan();
  Json base = **store.get("default", "m");
  ASSERT_TRUE(store.write_status(base, {{"replicas", 1}}).ok());
  auto stale = store.write_status(base, {{"replicas", 2}});
  ASSERT_FALSE(stale.ok());
  EXPECT_EQ(stale.error().code(), ErrorCode::kConflict);
}

TEST(ModelStore, StatusSurvivesARestartAndTheGenerationIsKept) {
  Dirs d;
  d.write("m.yaml", model_yaml("m"));
  std::string uid;
  {
    LocalModelStore store(d.manifests(), d.state());
    ASSERT_TRUE(store.load_state().ok());
    (void)store.scan();
    d.write("m.yaml", model_yaml("m", "int8"));
    (void)store.scan();
    Json base = **store.get("default", "m");
    uid = base["metadata"]["uid"];
    ASSERT_TRUE(store.write_status(base, {{"observedGeneration", 2}, {"replicas", 1}}).ok());
  }
  // The status file is readable YAML holding the whole object.
  auto text = read_file(d.state() / "status" / "default_m.yaml");
  ASSERT_TRUE(text.ok());
  auto saved = api::parse_yaml(*text, "status");
  ASSERT_TRUE(saved.ok());
  EXPECT_EQ((*saved)["status"]["observedGeneration"], 2);

  LocalModelStore again(d.manifests(), d.state());
  ASSERT_TRUE(again.load_state().ok());
  (void)again.scan();
  Json o = **again.get("default", "m");
  EXPECT_EQ(o["metadata"]["uid"], uid);
  EXPECT_EQ(o["metadata"]["generation"], 2);
  EXPECT_EQ(o["status"]["observedGeneration"], 2);
}

TEST(ModelStore, RemovingTheFileDeletesTheModel) {
  Dirs d;
  d.write("m.yaml", model_yaml("m"));
  LocalModelStore store(d.manifests(), d.state());
  ASSERT_TRUE(store.load_state().ok());
  (void)store.scan();
  fs::remove(d.manifests() / "m.yaml");
  EXPECT_EQ(store.scan(), (std::vector<std::string>{"default/m"}));
  EXPECT_FALSE(store.get("default", "m")->has_value());
  auto w = store.write_status(
      Json{{"metadata", {{"name", "m"}, {"namespace", "default"}, {"resourceVersion", "1"}}}},
      Json::object());
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.error().code(), ErrorCode::kNotFound);
  store.forget("default/m");
  EXPECT_FALSE(fs::exists(d.state() / "status" / "default_m.yaml"));
}

}  // namespace
}  // namespace infergate::op::local
