// kube::Client against the real API-server emulator binary
// (testing/kube-emulator): CRUD, errors, watches, faults, auth and TLS.
// cpprest defines a macro U() that breaks gtest unless told not to.
#define _TURN_OFF_PLATFORM_STRING
#include "backends/kubernetes/client/client.h"

#include <cpprest/http_client.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/config.h"
#include "common/testing/testing.h"

namespace antdt::kube {
namespace {

using antdt::testing::BinPath;
using antdt::testing::TempDir;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

const ResourceRef& ConfigMaps() {
  static const ResourceRef r{"", "v1", "configmaps", "ConfigMap", true};
  return r;
}

const ResourceRef& Widgets() {
  static const ResourceRef r{"test.antdt.io", "v1", "widgets", "Widget", true};
  return r;
}

Json ConfigMap(const std::string& name, const Json& data = Json::object(),
               const Json& labels = Json::object()) {
  return Json{{"apiVersion", "v1"},
              {"kind", "ConfigMap"},
              {"metadata", {{"name", name}, {"labels", labels}}},
              {"data", data}};
}

// One emulator process, its address and its control endpoint.
class Emulator {
 public:
  // Starts the emulator with `args` added; nullptr (and a message in
  // `error`) if it did not become ready.
  static std::unique_ptr<Emulator> Start(const TempDir& dir, const std::string& name,
                                         const std::vector<std::string>& args, bool tls,
                                         std::string* error) {
    std::string binary = BinPath("antdt-kube-emulator");
    std::string ready = dir.File(name + ".ready");
    std::vector<std::string> argv = {
        binary, "--listen", "127.0.0.1:0", "--ready-file", ready, "--bookmark-interval", "1s"};
    argv.insert(argv.end(), args.begin(), args.end());
    auto emulator = std::unique_ptr<Emulator>(new Emulator());
    emulator->log_ = dir.File(name + ".log");
    emulator->process_ = std::make_unique<Process>(argv, emulator->log_);
    std::optional<std::string> address = WaitForReadyFile(ready, 30s);
    if (!address.has_value()) {
      *error = "the emulator did not become ready; its log:\n" + emulator->Log();
      return nullptr;
    }
    std::string scheme = tls ? "https://" : "http://";
    emulator->server_ = address->rfind("http", 0) == 0 ? *address : scheme + *address;
    return emulator;
  }

  ~Emulator() {
    if (process_) {
      process_->Signal(SIGTERM);
      if (!process_->Wait(10s).has_value()) process_->Signal(SIGKILL);
      process_->Wait(10s);
    }
  }

  const std::string& server() const { return server_; }
  std::string Log() const {
    absl::StatusOr<std::string> text = ReadFile(log_);
    return text.ok() ? *text : "";
  }

  // A raw request to the control endpoint.
  Json Control(const web::http::method& method, const std::string& path,
               const Json& body = Json()) {
    web::http::client::http_client_config cfg;
    cfg.set_validate_certificates(false);
    web::http::client::http_client client(web::uri(server_), cfg);
    web::http::http_request request(method);
    request.set_request_uri(web::uri(path));
    if (!token_.empty()) request.headers().add("Authorization", "Bearer " + token_);
    if (!body.is_null()) request.set_body(body.dump(), "application/json");
    web::http::http_response response = client.request(request).get();
    std::string text = response.extract_utf8string(true).get();
    EXPECT_EQ(response.status_code(), 200) << path << ": " << text;
    Json parsed = Json::parse(text, nullptr, false);
    return parsed.is_discarded() ? Json() : parsed;
  }

  void Fault(const Json& fault) { Control(web::http::methods::POST, "/emulator/v1/faults", fault); }

  // The request log, filtered to paths containing `path_contains`.
  std::vector<Json> Requests(const std::string& path_contains) {
    std::vector<Json> out;
    Json all = Control(web::http::methods::GET, "/emulator/v1/requests");
    for (const Json& r : all) {
      if (r.value("path", "").find(path_contains) != std::string::npos) out.push_back(r);
    }
    return out;
  }

  void set_token(const std::string& token) { token_ = token; }

 private:
  Emulator() = default;
  std::unique_ptr<Process> process_;
  std::string log_;
  std::string server_;
  std::string token_;
};

class KubeClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(BinPath("antdt-kube-emulator"))) {
      GTEST_SKIP() << "antdt-kube-emulator is not built (" << BinPath("antdt-kube-emulator") << ")";
    }
  }

  // Starts an emulator and a client for it.
  void StartEmulator(const std::vector<std::string>& args = {}, ClientOptions options = {}) {
    std::string error;
    emulator_ = Emulator::Start(dir_, "emulator", args, false, &error);
    ASSERT_NE(emulator_, nullptr) << error;
    ClusterConfig config;
    config.server = emulator_->server();
    options.on_request = [this](const std::string& verb, const std::string& resource, int code,
                                double) {
      std::lock_guard<std::mutex> lock(mu_);
      calls_.push_back(verb + " " + resource + " " + std::to_string(code));
    };
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(config, options);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
  }

  std::vector<std::string> Calls() {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }

  void CreateWidgetCrd() {
    Json crd = Json::parse(R"({
      "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
      "metadata": {"name": "widgets.test.antdt.io"},
      "spec": {"group": "test.antdt.io", "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget",
                  "listKind": "WidgetList"},
        "versions": [{"name": "v1", "served": true, "storage": true,
          "subresources": {"status": {}},
          "schema": {"openAPIV3Schema": {"type": "object", "properties": {
            "spec": {"type": "object", "required": ["replicas"], "properties": {
              "replicas": {"type": "integer", "minimum": 0},
              "image": {"type": "string"}}},
            "status": {"type": "object", "properties": {
              "phase": {"type": "string"}}}}}}}]}})");
    absl::StatusOr<Json> created = client_->Create(CrdsResource(), "", crd);
    ASSERT_TRUE(created.ok()) << created.status();
    // The custom resource is served once the CRD is established.
    ASSERT_TRUE(WaitFor([&] { return client_->List(Widgets(), "default", {}).ok(); }, 30s));
  }

  TempDir dir_;
  std::unique_ptr<Emulator> emulator_;
  std::unique_ptr<Client> client_;
  std::mutex mu_;
  std::vector<std::string> calls_;
};

TEST_F(KubeClientTest, ConfigMapCrudAndErrors) {
  StartEmulator();
  absl::StatusOr<Json> created =
      client_->Create(ConfigMaps(), "default", ConfigMap("cm1", {{"k", "v1"}}));
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ((*created)["metadata"]["namespace"], "default");
  std::string rv1 = ResourceVersionOf(*created);
  EXPECT_FALSE(rv1.empty());
  EXPECT_EQ(KeyOf(*created), "default/cm1");

  // The namespace may also come from the object.
  Json in_ns = ConfigMap("cm2");
  in_ns["metadata"]["namespace"] = "default";
  EXPECT_TRUE(client_->Create(ConfigMaps(), "", in_ns).ok());

  absl::StatusOr<Json> again = client_->Create(ConfigMaps(), "default", ConfigMap("cm1"));
  ASSERT_FALSE(again.ok());
  EXPECT_TRUE(kube::IsAlreadyExists(again.status())) << again.status();
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists);

  absl::StatusOr<Json> missing = client_->Get(ConfigMaps(), "default", "nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(kube::IsNotFound(missing.status())) << missing.status();
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(StatusObject(missing.status()).has_value());
  EXPECT_EQ((*StatusObject(missing.status()))["kind"], "Status");

  absl::StatusOr<Json> got = client_->Get(ConfigMaps(), "default", "cm1");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ((*got)["data"]["k"], "v1");

  Json changed = *got;
  changed["data"]["k"] = "v2";
  absl::StatusOr<Json> updated = client_->Update(ConfigMaps(), "default", changed);
  ASSERT_TRUE(updated.ok()) << updated.status();
  EXPECT_EQ((*updated)["data"]["k"], "v2");
  EXPECT_NE(ResourceVersionOf(*updated), rv1);

  // `changed` still carries rv1: a stale write.
  changed["data"]["k"] = "v3";
  absl::StatusOr<Json> stale = client_->Update(ConfigMaps(), "default", changed);
  ASSERT_FALSE(stale.ok());
  EXPECT_TRUE(kube::IsConflict(stale.status())) << stale.status();
  EXPECT_EQ(stale.status().code(), absl::StatusCode::kAborted);

  absl::StatusOr<Json> patched =
      client_->Patch(ConfigMaps(), "default", "cm1", {{"data", {{"k", nullptr}, {"other", "x"}}}});
  ASSERT_TRUE(patched.ok()) << patched.status();
  EXPECT_FALSE((*patched)["data"].contains("k"));
  EXPECT_EQ((*patched)["data"]["other"], "x");

  absl::StatusOr<Json> json_patched =
      client_->Patch(ConfigMaps(), "default", "cm1",
                     Json::array({{{"op", "replace"}, {"path", "/data/other"}, {"value", "y"}}}),
                     PatchType::kJson);
  ASSERT_TRUE(json_patched.ok()) << json_patched.status();
  EXPECT_EQ((*json_patched)["data"]["other"], "y");

  // The patch bodies went out with exactly the patch content types.
  std::vector<std::string> patch_types;
  for (const Json& r : emulator_->Requests("/configmaps/cm1")) {
    if (r.value("method", "") == "PATCH") patch_types.push_back(r.value("contentType", ""));
    EXPECT_THAT(r.value("userAgent", ""), HasSubstr("antdt-operator"));
  }
  EXPECT_THAT(patch_types, ::testing::ElementsAre("application/merge-patch+json",
                                                  "application/json-patch+json"));

  // Deletion with preconditions.
  DeleteOptions stale_rv;
  stale_rv.precondition_resource_version = rv1;
  absl::Status deleted = client_->Delete(ConfigMaps(), "default", "cm1", stale_rv);
  EXPECT_TRUE(kube::IsConflict(deleted)) << deleted;
  DeleteOptions right_uid;
  right_uid.precondition_uid = (*json_patched)["metadata"]["uid"];
  right_uid.propagation_policy = "Background";
  EXPECT_TRUE(client_->Delete(ConfigMaps(), "default", "cm1", right_uid).ok());
  EXPECT_TRUE(kube::IsNotFound(client_->Get(ConfigMaps(), "default", "cm1").status()));
  EXPECT_TRUE(kube::IsNotFound(client_->Delete(ConfigMaps(), "default", "cm1")));

  // A namespaced kind needs a namespace.
  EXPECT_EQ(client_->Get(ConfigMaps(), "", "cm2").status().code(),
            absl::StatusCode::kInvalidArgument);

  std::vector<std::string> calls = Calls();
  EXPECT_THAT(calls, ::testing::IsSupersetOf({"create configmaps 201", "get configmaps 404",
                                              "update configmaps 200", "update configmaps 409",
                                              "patch configmaps 200", "delete configmaps 200",
                                              "get configmaps 200"}));
}

TEST_F(KubeClientTest, PodsListWithSelectorsAndPages) {
  StartEmulator();
  for (int i = 0; i < 7; ++i) {
    Json pod = {
        {"apiVersion", "v1"},
        {"kind", "Pod"},
        {"metadata",
         {{"name", "p" + std::to_string(i)}, {"labels", {{"app", i % 2 == 0 ? "even" : "odd"}}}}},
        {"spec", {{"containers", {{{"name", "c"}, {"image", "busybox"}}}}}}};
    ASSERT_TRUE(client_->Create(PodsResource(), "team", pod).ok());
  }
  ListOptions options;
  options.limit = 2;
  absl::StatusOr<Json> all = client_->List(PodsResource(), "team", options);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ((*all)["items"].size(), 7u);
  EXPECT_FALSE(ResourceVersionOf(*all).empty());
  EXPECT_FALSE((*all)["metadata"].contains("continue"));

  options.label_selector = "app=even";
  absl::StatusOr<Json> even = client_->List(PodsResource(), "team", options);
  ASSERT_TRUE(even.ok()) << even.status();
  EXPECT_EQ((*even)["items"].size(), 4u);
  for (const Json& pod : (*even)["items"]) EXPECT_EQ(pod["metadata"]["labels"]["app"], "even");

  ListOptions by_name;
  by_name.field_selector = "metadata.name=p3";
  absl::StatusOr<Json> one = client_->List(PodsResource(), "", by_name);  // all namespaces
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_EQ((*one)["items"].size(), 1u);
  EXPECT_EQ(KeyOf((*one)["items"][0]), "team/p3");

  // Every list page was a request of its own, continue tokens included.
  int pages = 0;
  for (const Json& r : emulator_->Requests("/namespaces/team/pods")) {
    if (r.value("method", "") == "GET") ++pages;
  }
  EXPECT_GE(pages, 2);
}

TEST_F(KubeClientTest, CustomResourceWithStatusSubresource) {
  StartEmulator();
  CreateWidgetCrd();
  Json widget = {{"apiVersion", "test.antdt.io/v1"},
                 {"kind", "Widget"},
                 {"metadata", {{"name", "w1"}}},
                 {"spec", {{"replicas", 2}, {"image", "a"}}}};
  absl::StatusOr<Json> created = client_->Create(Widgets(), "default", widget);
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ((*created)["metadata"]["generation"], 1);

  // Custom resources need the resourceVersion on update: 422.
  Json no_rv = *created;
  no_rv["metadata"].erase("resourceVersion");
  absl::StatusOr<Json> unconditional = client_->Update(Widgets(), "default", no_rv);
  ASSERT_FALSE(unconditional.ok());
  EXPECT_TRUE(kube::IsInvalid(unconditional.status())) << unconditional.status();
  EXPECT_EQ(unconditional.status().code(), absl::StatusCode::kInvalidArgument);

  Json with_status = *created;
  with_status["status"] = {{"phase", "Running"}};
  absl::StatusOr<Json> status_updated = client_->UpdateStatus(Widgets(), "default", with_status);
  ASSERT_TRUE(status_updated.ok()) << status_updated.status();
  EXPECT_EQ((*status_updated)["status"]["phase"], "Running");
  EXPECT_EQ((*status_updated)["metadata"]["generation"], 1);

  // The main resource ignores status; a spec change bumps the generation.
  Json spec_change = *status_updated;
  spec_change["spec"]["replicas"] = 3;
  spec_change["status"]["phase"] = "Ignored";
  absl::StatusOr<Json> updated = client_->Update(Widgets(), "default", spec_change);
  ASSERT_TRUE(updated.ok()) << updated.status();
  EXPECT_EQ((*updated)["spec"]["replicas"], 3);
  EXPECT_EQ((*updated)["status"]["phase"], "Running");
  EXPECT_EQ((*updated)["metadata"]["generation"], 2);

  absl::StatusOr<Json> status_patched = client_->Patch(
      Widgets(), "default", "w1", {{"status", {{"phase", "Done"}}}}, PatchType::kMerge, "status");
  ASSERT_TRUE(status_patched.ok()) << status_patched.status();
  EXPECT_EQ((*status_patched)["status"]["phase"], "Done");

  // A merge patch carrying a stale resourceVersion is a conflict.
  absl::StatusOr<Json> stale_patch =
      client_->Patch(Widgets(), "default", "w1",
                     {{"metadata", {{"resourceVersion", ResourceVersionOf(*created)}}},
                      {"spec", {{"image", "b"}}}});
  EXPECT_TRUE(kube::IsConflict(stale_patch.status())) << stale_patch.status();

  absl::StatusOr<Json> list = client_->List(Widgets(), "default", {});
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ((*list)["items"].size(), 1u);
  EXPECT_EQ((*list)["items"][0]["status"]["phase"], "Done");

  EXPECT_TRUE(client_->Delete(Widgets(), "default", "w1").ok());
  EXPECT_TRUE(kube::IsNotFound(client_->Get(Widgets(), "default", "w1").status()));
  EXPECT_TRUE(client_->Get(CrdsResource(), "", "widgets.test.antdt.io").ok());

  // The CRD's schema rejects a string where an integer belongs: 422.
  Json bad = widget;
  bad["metadata"]["name"] = "w2";
  bad["spec"]["replicas"] = "many";
  absl::StatusOr<Json> invalid = client_->Create(Widgets(), "default", bad);
  EXPECT_TRUE(kube::IsInvalid(invalid.status())) << invalid.status();
}

// Collects watch events on a thread of its own.
class WatchRunner {
 public:
  WatchRunner(Client* client, const ResourceRef& r, const std::string& ns, WatchOptions options,
              std::function<bool(const WatchEvent&)> stop_after = nullptr)
      : cancel_(client->NewCancel()) {
    thread_ = std::thread([this, client, r, ns, options, stop_after] {
      absl::Status status = client->Watch(
          r, ns, options,
          [this, stop_after](const WatchEvent& event) {
            std::lock_guard<std::mutex> lock(mu_);
            events_.push_back(event);
            return stop_after ? !stop_after(event) : true;
          },
          cancel_.get());
      std::lock_guard<std::mutex> lock(mu_);
      status_ = status;
      done_ = true;
    });
  }
  ~WatchRunner() {
    cancel_->Trigger();
    thread_.join();
  }

  std::vector<WatchEvent> Events() {
    std::lock_guard<std::mutex> lock(mu_);
    return events_;
  }
  bool HasEvent(const std::string& type) {
    for (const WatchEvent& e : Events()) {
      if (e.type == type) return true;
    }
    return false;
  }
  bool Done() {
    std::lock_guard<std::mutex> lock(mu_);
    return done_;
  }
  absl::Status status() {
    std::lock_guard<std::mutex> lock(mu_);
    return status_;
  }
  Cancel& cancel() { return *cancel_; }

 private:
  std::unique_ptr<Cancel> cancel_;
  std::mutex mu_;
  std::vector<WatchEvent> events_;
  absl::Status status_;
  bool done_ = false;
  std::thread thread_;
};

TEST_F(KubeClientTest, WatchDeliversEventsAndBookmarks) {
  StartEmulator();
  absl::StatusOr<Json> list = client_->List(ConfigMaps(), "w", {});
  ASSERT_TRUE(list.ok()) << list.status();
  WatchOptions options;
  options.resource_version = ResourceVersionOf(*list);
  options.timeout_seconds = 120;
  bool deleted = false;
  WatchRunner watch(client_.get(), ConfigMaps(), "w", options, [&](const WatchEvent& e) {
    if (e.type == "DELETED") deleted = true;
    return deleted && e.type == "BOOKMARK";  // stop at the first bookmark after the delete
  });

  ASSERT_TRUE(client_->Create(ConfigMaps(), "w", ConfigMap("a", {{"x", "1"}})).ok());
  ASSERT_TRUE(client_->Patch(ConfigMaps(), "w", "a", {{"data", {{"x", "2"}}}}).ok());
  ASSERT_TRUE(client_->Delete(ConfigMaps(), "w", "a").ok());

  ASSERT_TRUE(WaitFor([&] { return watch.Done(); }, 60s)) << "events: " << watch.Events().size();
  EXPECT_TRUE(watch.status().ok()) << watch.status();
  std::vector<std::string> types;
  for (const WatchEvent& e : watch.Events()) {
    if (e.type == "BOOKMARK") {
      EXPECT_FALSE(ResourceVersionOf(e.object).empty());
      continue;
    }
    types.push_back(e.type);
    EXPECT_EQ(KeyOf(e.object), "w/a");
  }
  EXPECT_THAT(types, ::testing::ElementsAre("ADDED", "MODIFIED", "DELETED"));
  EXPECT_EQ(watch.Events().back().type, "BOOKMARK");
  EXPECT_THAT(Calls(), ::testing::Contains("watch configmaps 200"));
  // The request asked for bookmarks and a server-side timeout. (The
  // emulator logs a watch once it notices the stream has ended.)
  std::string query;
  ASSERT_TRUE(WaitFor(
      [&] {
        for (const Json& r : emulator_->Requests("/namespaces/w/configmaps")) {
          if (r.value("query", "").find("watch=1") != std::string::npos) {
            query = r.value("query", "");
            return true;
          }
        }
        return false;
      },
      30s));
  EXPECT_THAT(query, HasSubstr("allowWatchBookmarks=true"));
  EXPECT_THAT(query, HasSubstr("timeoutSeconds=120"));
  EXPECT_THAT(query, HasSubstr("resourceVersion=" + options.resource_version));
}

TEST_F(KubeClientTest, WatchServerTimeoutEndsCleanly) {
  StartEmulator();
  WatchOptions options;
  options.timeout_seconds = 1;
  options.allow_bookmarks = false;
  WatchRunner watch(client_.get(), ConfigMaps(), "quiet", options);
  ASSERT_TRUE(WaitFor([&] { return watch.Done(); }, 60s));
  EXPECT_TRUE(watch.status().ok()) << watch.status();
}

TEST_F(KubeClientTest, ExpireWatchesPassesTheErrorEventThrough) {
  StartEmulator();
  WatchOptions options;
  options.timeout_seconds = 120;
  WatchRunner watch(client_.get(), ConfigMaps(), "e", options,
                    [](const WatchEvent& e) { return e.type == "ERROR"; });
  // A bookmark shows the stream is open.
  ASSERT_TRUE(WaitFor([&] { return watch.HasEvent("BOOKMARK"); }, 60s));
  emulator_->Fault({{"expireWatches", true}});
  ASSERT_TRUE(WaitFor([&] { return watch.Done(); }, 60s));
  EXPECT_TRUE(watch.status().ok()) << watch.status();
  const WatchEvent last = watch.Events().back();
  ASSERT_EQ(last.type, "ERROR");
  EXPECT_EQ(last.object["kind"], "Status");
  EXPECT_EQ(last.object["code"], 410);
  EXPECT_TRUE(kube::IsExpired(ApiError(410, last.object)));
}

TEST_F(KubeClientTest, DroppedWatchIsUnavailable) {
  StartEmulator();
  WatchOptions options;
  options.timeout_seconds = 120;
  WatchRunner watch(client_.get(), ConfigMaps(), "d", options);
  ASSERT_TRUE(WaitFor([&] { return watch.HasEvent("BOOKMARK"); }, 60s));
  emulator_->Fault({{"dropWatches", true}});
  ASSERT_TRUE(WaitFor([&] { return watch.Done(); }, 60s));
  EXPECT_EQ(watch.status().code(), absl::StatusCode::kUnavailable) << watch.status();
}

TEST_F(KubeClientTest, WatchFromCompactedVersionIsExpired) {
  StartEmulator({"--history", "2"});
  absl::StatusOr<Json> first = client_->Create(ConfigMaps(), "c", ConfigMap("c0"));
  ASSERT_TRUE(first.ok()) << first.status();
  for (int i = 1; i < 6; ++i) {
    ASSERT_TRUE(client_->Create(ConfigMaps(), "c", ConfigMap("c" + std::to_string(i))).ok());
  }
  emulator_->Fault({{"compact", true}});
  WatchOptions options;
  options.resource_version = ResourceVersionOf(*first);
  options.timeout_seconds = 60;
  std::vector<WatchEvent> events;
  absl::Status status = client_->Watch(
      ConfigMaps(), "c", options,
      [&](const WatchEvent& e) {
        events.push_back(e);
        return e.type != "ERROR";
      },
      nullptr);
  if (status.ok()) {
    // The apiserver's own way: 200, then one ERROR event with 410.
    ASSERT_FALSE(events.empty());
    EXPECT_EQ(events.back().type, "ERROR");
    EXPECT_TRUE(kube::IsExpired(ApiError(410, events.back().object)));
  } else {
    EXPECT_TRUE(kube::IsExpired(status)) << status;
    EXPECT_EQ(status.code(), absl::StatusCode::kOutOfRange);
    EXPECT_TRUE(events.empty());
  }
}

TEST_F(KubeClientTest, ExactListOfAnOldVersionIsHttp410) {
  StartEmulator();
  absl::StatusOr<Json> first = client_->Create(ConfigMaps(), "x", ConfigMap("x0"));
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(client_->Create(ConfigMaps(), "x", ConfigMap("x1")).ok());
  emulator_->Fault({{"compact", true}});
  ListOptions options;
  options.resource_version = ResourceVersionOf(*first);
  options.resource_version_match = "Exact";
  absl::StatusOr<Json> list = client_->List(ConfigMaps(), "x", options);
  ASSERT_FALSE(list.ok());
  EXPECT_EQ(HttpCode(list.status()), 410);
  EXPECT_TRUE(kube::IsExpired(list.status())) << list.status();
  EXPECT_EQ(list.status().code(), absl::StatusCode::kOutOfRange);
  bool sent = false;
  for (const Json& r : emulator_->Requests("/namespaces/x/configmaps")) {
    if (r.value("query", "").find("resourceVersionMatch=Exact") != std::string::npos) sent = true;
  }
  EXPECT_TRUE(sent);
}

TEST_F(KubeClientTest, FailedWatchRequestIsAnApiError) {
  StartEmulator();
  emulator_->Fault(
      {{"inject", {{"code", 500}, {"count", 1}, {"verbs", {"watch"}}, {"pathContains", "/f/"}}}});
  WatchOptions options;
  options.timeout_seconds = 30;
  int events = 0;
  absl::Status status = client_->Watch(
      ConfigMaps(), "f", options,
      [&](const WatchEvent&) {
        ++events;
        return false;
      },
      nullptr);
  EXPECT_EQ(HttpCode(status), 500) << status;
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(events, 0);
  EXPECT_THAT(Calls(), ::testing::Contains("watch configmaps 500"));
}

TEST_F(KubeClientTest, CancelAbortsABlockedWatch) {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  StartEmulator();
  // Re-create the client with a hook that says when the watch's headers came.
  ClientOptions options;
  options.on_request = [&](const std::string& verb, const std::string&, int code, double) {
    if (verb == "watch" && code == 200) {
      std::lock_guard<std::mutex> lock(mu);
      open = true;
      cv.notify_all();
    }
  };
  ClusterConfig config;
  config.server = emulator_->server();
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(config, options);
  ASSERT_TRUE(client.ok()) << client.status();

  WatchOptions watch_options;
  watch_options.timeout_seconds = 300;
  watch_options.allow_bookmarks = false;  // nothing will arrive
  WatchRunner watch(client->get(), ConfigMaps(), "idle", watch_options);
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, 60s, [&] { return open; }));
  }
  watch.cancel().Trigger();
  // Far less than the watch's 300 s.
  ASSERT_TRUE(WaitFor([&] { return watch.Done(); }, 30s));
  EXPECT_EQ(watch.status().code(), absl::StatusCode::kCancelled) << watch.status();

  // A cancelled Cancel stops the next watch before it starts.
  absl::Status again = (*client)->Watch(
      ConfigMaps(), "idle", watch_options, [](const WatchEvent&) { return true; }, &watch.cancel());
  EXPECT_EQ(again.code(), absl::StatusCode::kCancelled);
}

TEST_F(KubeClientTest, TooManyRequestsIsRetriedAfterRetryAfter) {
  ClientOptions options;
  options.max_retries_429 = 2;
  StartEmulator({}, options);
  ASSERT_TRUE(client_->Create(ConfigMaps(), "default", ConfigMap("busy")).ok());
  emulator_->Fault({{"inject",
                     {{"code", 429},
                      {"count", 1},
                      {"verbs", {"get"}},
                      {"pathContains", "/configmaps/busy"},
                      {"retryAfterSeconds", 1}}}});
  absl::StatusOr<Json> got = client_->Get(ConfigMaps(), "default", "busy");
  ASSERT_TRUE(got.ok()) << got.status();
  std::vector<Json> log;
  for (const Json& r : emulator_->Requests("/configmaps/busy")) {
    if (r.value("method", "") == "GET") log.push_back(r);
  }
  ASSERT_EQ(log.size(), 2u);
  EXPECT_EQ(log[0]["code"], 429);
  EXPECT_EQ(log[1]["code"], 200);
  // The retry waited for Retry-After (a lower bound only).
  EXPECT_GE(log[1]["timeUnixMs"].get<int64_t>() - log[0]["timeUnixMs"].get<int64_t>(), 900);
  EXPECT_THAT(Calls(), ::testing::IsSupersetOf({"get configmaps 429", "get configmaps 200"}));

  // More 429s than retries: the error, with its retry hint.
  emulator_->Fault({{"inject",
                     {{"code", 429},
                      {"count", 5},
                      {"pathContains", "/configmaps/busy"},
                      {"retryAfterSeconds", 1}}}});
  absl::StatusOr<Json> throttled = client_->Get(ConfigMaps(), "default", "busy");
  ASSERT_FALSE(throttled.ok());
  EXPECT_TRUE(kube::IsTooManyRequests(throttled.status())) << throttled.status();
  EXPECT_EQ(RetryAfterSeconds(throttled.status()), 1);
}

TEST_F(KubeClientTest, InjectedServerErrorsMapToStatuses) {
  StartEmulator();
  emulator_->Fault({{"inject", {{"code", 500}, {"count", 1}, {"pathContains", "/configmaps"}}}});
  absl::StatusOr<Json> failed = client_->List(ConfigMaps(), "default", {});
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(HttpCode(failed.status()), 500);
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(client_->List(ConfigMaps(), "default", {}).ok());

  emulator_->Fault({{"inject", {{"code", 409}, {"count", 1}, {"pathContains", "/configmaps"}}}});
  absl::StatusOr<Json> conflict = client_->Create(ConfigMaps(), "default", ConfigMap("z"));
  ASSERT_FALSE(conflict.ok());
  EXPECT_TRUE(kube::IsConflict(conflict.status())) << conflict.status();
}

TEST_F(KubeClientTest, TransportErrorsAreUnavailable) {
  ClusterConfig config;
  config.server = "http://127.0.0.1:1";  // nothing listens there
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(config, {});
  ASSERT_TRUE(client.ok());
  absl::StatusOr<Json> got = (*client)->Get(ConfigMaps(), "default", "x");
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable) << got.status();
  EXPECT_EQ(HttpCode(got.status()), 0);
  absl::Status watch = (*client)->Watch(
      ConfigMaps(), "default", {}, [](const WatchEvent&) { return true; }, nullptr);
  EXPECT_EQ(watch.code(), absl::StatusCode::kUnavailable) << watch;

  config.server = "ftp://example";
  EXPECT_FALSE(Client::Create(config, {}).ok());
  config.server = "https://127.0.0.1:1";
  config.ca_data = "not a certificate";
  EXPECT_FALSE(Client::Create(config, {}).ok());
}

TEST_F(KubeClientTest, RereadsTheTokenFileAfterUnauthorized) {
  std::string token_file = dir_.File("token");
  ASSERT_TRUE(WriteFileAtomically(token_file, "token-one\n").ok());
  std::string error;
  emulator_ = Emulator::Start(dir_, "auth", {"--token-file", token_file}, false, &error);
  ASSERT_NE(emulator_, nullptr) << error;

  ClusterConfig config;
  config.server = emulator_->server();
  config.token_file = token_file;
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(config, {});
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->Create(ConfigMaps(), "default", ConfigMap("t")).ok());

  // The token rotates: the client still holds token-one (read < 60 s ago),
  // gets a 401, re-reads the file and retries once.
  ASSERT_TRUE(WriteFileAtomically(token_file, "token-two\n").ok());
  emulator_->set_token("token-two");
  absl::StatusOr<Json> got = (*client)->Get(ConfigMaps(), "default", "t");
  ASSERT_TRUE(got.ok()) << got.status();
  std::vector<int> codes;
  for (const Json& r : emulator_->Requests("/configmaps/t")) codes.push_back(r.value("code", 0));
  EXPECT_THAT(codes, ::testing::ElementsAre(401, 200));

  // A static wrong token is Unauthenticated (no retry without a file).
  ClusterConfig wrong;
  wrong.server = emulator_->server();
  wrong.token = "nope";
  absl::StatusOr<std::unique_ptr<Client>> wrong_client = Client::Create(wrong, {});
  ASSERT_TRUE(wrong_client.ok());
  absl::StatusOr<Json> denied = (*wrong_client)->Get(ConfigMaps(), "default", "t");
  EXPECT_EQ(denied.status().code(), absl::StatusCode::kUnauthenticated) << denied.status();
}

// Runs openssl; false on failure.
bool Openssl(const std::string& args, const std::string& log) {
  std::string command = "openssl " + args + " >>" + log + " 2>&1";
  return std::system(command.c_str()) == 0;
}

TEST_F(KubeClientTest, Tls) {
  std::string log = dir_.File("openssl.log");
  std::string ca_key = dir_.File("ca.key"), ca_crt = dir_.File("ca.crt");
  std::string key = dir_.File("server.key"), csr = dir_.File("server.csr"),
              crt = dir_.File("server.crt"), ext = dir_.File("san.ext");
  ASSERT_TRUE(WriteFileAtomically(ext, "subjectAltName=IP:127.0.0.1\n").ok());
  ASSERT_TRUE(Openssl("req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=antdt-test-ca -keyout " +
                          ca_key + " -out " + ca_crt,
                      log));
  ASSERT_TRUE(Openssl(
      "req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -keyout " + key + " -out " + csr, log));
  ASSERT_TRUE(Openssl("x509 -req -in " + csr + " -CA " + ca_crt + " -CAkey " + ca_key +
                          " -CAcreateserial -days 2 -extfile " + ext + " -out " + crt,
                      log));

  std::string error;
  emulator_ = Emulator::Start(dir_, "tls", {"--tls-cert", crt, "--tls-key", key}, true, &error);
  if (emulator_ == nullptr) {
    GTEST_SKIP() << "the emulator did not start with --tls-cert/--tls-key: " << error;
  }
  if (emulator_->server().rfind("https://", 0) != 0) {
    GTEST_SKIP() << "the emulator serves " << emulator_->server() << ", not https";
  }

  ClusterConfig config;
  config.server = emulator_->server();
  config.ca_file = ca_crt;
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(config, {});
  ASSERT_TRUE(client.ok()) << client.status();
  absl::StatusOr<Json> created = (*client)->Create(ConfigMaps(), "default", ConfigMap("tls"));
  ASSERT_TRUE(created.ok()) << created.status();

  // The CA as data works too; a watch goes over TLS as well.
  ClusterConfig data_config;
  data_config.server = emulator_->server();
  data_config.ca_data = *ReadFile(ca_crt);
  absl::StatusOr<std::unique_ptr<Client>> data_client = Client::Create(data_config, {});
  ASSERT_TRUE(data_client.ok()) << data_client.status();
  WatchOptions options;
  options.timeout_seconds = 30;
  std::vector<std::string> names;
  absl::Status watched = (*data_client)
                             ->Watch(
                                 ConfigMaps(), "default", options,
                                 [&](const WatchEvent& e) {
                                   if (e.type == "ADDED") names.push_back(KeyOf(e.object));
                                   return e.type != "ADDED";
                                 },
                                 nullptr);
  EXPECT_TRUE(watched.ok()) << watched;
  EXPECT_THAT(names, ::testing::ElementsAre("default/tls"));

  // Without the CA the server is not trusted...
  ClusterConfig untrusted;
  untrusted.server = emulator_->server();
  absl::StatusOr<std::unique_ptr<Client>> untrusted_client = Client::Create(untrusted, {});
  ASSERT_TRUE(untrusted_client.ok());
  EXPECT_EQ((*untrusted_client)->Get(ConfigMaps(), "default", "tls").status().code(),
            absl::StatusCode::kUnavailable);
  // ...unless verification is off.
  untrusted.insecure_skip_tls_verify = true;
  absl::StatusOr<std::unique_ptr<Client>> insecure_client = Client::Create(untrusted, {});
  ASSERT_TRUE(insecure_client.ok());
  EXPECT_TRUE((*insecure_client)->Get(ConfigMaps(), "default", "tls").ok());
}

}  // namespace
}  // namespace antdt::kube
