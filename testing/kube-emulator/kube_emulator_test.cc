// Starts the antdt-kube-emulator binary and checks the API-server semantics the
// operator and kubelet rely on (reference: shared kubernetes-api.md §1-§2).
#include <signal.h>
#include <sys/socket.h>

#include <algorithm>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/testing/testing.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace antdt::kubeemu {
namespace {

using json = nlohmann::json;
using antdt::testing::BinPath;
using antdt::testing::Process;
using antdt::testing::TempDir;
using antdt::testing::WaitFor;
using antdt::testing::WaitForReadyFile;
namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using namespace std::chrono_literals;

struct Reply {
  int code = 0;
  std::string body;
  std::string retry_after;
  std::string content_type;
  std::vector<std::string> warnings;  // Warning headers
  json Json() const { return json::parse(body, nullptr, false); }
};

tcp::socket Connect(net::io_context& ioc, const std::string& address) {
  size_t colon = address.rfind(':');
  tcp::socket socket(ioc);
  socket.connect(tcp::endpoint(net::ip::make_address(address.substr(0, colon)),
                               static_cast<unsigned short>(std::stoi(address.substr(colon + 1)))));
  return socket;
}

Reply Call(const std::string& address, const std::string& method, const std::string& target,
           const std::string& body = "", const std::string& content_type = "application/json",
           const std::vector<std::pair<std::string, std::string>>& headers = {}) {
  net::io_context ioc;
  tcp::socket socket = Connect(ioc, address);
  http::request<http::string_body> req{http::string_to_verb(method), target, 11};
  req.set(http::field::host, address);
  req.set(http::field::user_agent, "kube-emulator-test");
  if (!body.empty()) req.set(http::field::content_type, content_type);
  for (const auto& [k, v] : headers) req.set(k, v);
  req.body() = body;
  req.prepare_payload();
  http::write(socket, req);
  beast::flat_buffer buffer;
  http::response<http::string_body> res;
  http::read(socket, buffer, res);
  Reply r;
  r.code = static_cast<int>(res.result_int());
  r.body = res.body();
  r.retry_after = std::string(res[http::field::retry_after]);
  r.content_type = std::string(res[http::field::content_type]);
  for (const auto& field : res) {
    if (field.name() == http::field::warning) r.warnings.emplace_back(field.value());
  }
  return r;
}

// A watch stream read on its own thread into a queue of events.
class WatchStream {
 public:
  WatchStream(const std::string& address, const std::string& target) : socket_(ioc_) {
    socket_ = Connect(ioc_, address);
    http::request<http::empty_body> req{http::verb::get, target, 11};
    req.set(http::field::host, address);
    http::write(socket_, req);
    reader_ = std::thread([this] { Read(); });
  }
  ~WatchStream() {
    ::shutdown(socket_.native_handle(), SHUT_RDWR);
    reader_.join();
  }

  // The next event, or nullopt when the stream ended or `timeout` passed.
  std::optional<json> Next(std::chrono::milliseconds timeout = 10s) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, timeout, [this] { return !events_.empty() || ended_ || aborted_; });
    if (events_.empty()) return std::nullopt;
    json e = events_.front();
    events_.pop_front();
    return e;
  }
  // The next event that is not a BOOKMARK.
  std::optional<json> NextChange(std::chrono::milliseconds timeout = 10s) {
    for (;;) {
      auto e = Next(timeout);
      if (!e || (*e)["type"] != "BOOKMARK") return e;
    }
  }
  bool WaitEnd(std::chrono::milliseconds timeout = 10s) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [this] { return ended_ || aborted_; });
  }
  bool ended() {
    std::lock_guard<std::mutex> lock(mu_);
    return ended_;
  }
  bool aborted() {
    std::lock_guard<std::mutex> lock(mu_);
    return aborted_;
  }
  int status() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, 10s, [this] { return status_ != 0 || aborted_; });
    return status_;
  }

 private:
  void Read() {
    beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());
    beast::error_code ec;
    http::read_header(socket_, buffer, parser, ec);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!ec) status_ = static_cast<int>(parser.get().result_int());
      cv_.notify_all();
    }
    size_t consumed = 0;
    while (!ec && !parser.is_done()) {
      http::read_some(socket_, buffer, parser, ec);
      std::string& body = parser.get().body();
      std::lock_guard<std::mutex> lock(mu_);
      size_t nl;
      while ((nl = body.find('\n', consumed)) != std::string::npos) {
        events_.push_back(json::parse(body.substr(consumed, nl - consumed)));
        consumed = nl + 1;
      }
      cv_.notify_all();
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (parser.is_done()) {
      ended_ = true;
    } else {
      aborted_ = true;
    }
    cv_.notify_all();
  }

  net::io_context ioc_;
  tcp::socket socket_;
  std::thread reader_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<json> events_;
  int status_ = 0;
  bool ended_ = false;
  bool aborted_ = false;
};

const char kCrd[] = R"({
  "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
  "metadata": {"name": "widgets.test.antdt.io"},
  "spec": {
    "group": "test.antdt.io", "scope": "Namespaced",
    "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "shortNames": ["wd"]},
    "versions": [{
      "name": "v1", "served": true, "storage": true,
      "subresources": {"status": {}},
      "additionalPrinterColumns": [
        {"name": "Replicas", "type": "integer", "jsonPath": ".spec.workers.replicas"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}],
      "schema": {"openAPIV3Schema": {
        "type": "object",
        "properties": {
          "spec": {"type": "object", "properties": {
            "size": {"type": "integer"},
            "nodeName": {"type": "string"},
            "parts": {"type": "array", "items": {"type": "object", "properties": {
              "name": {"type": "string"}}}},
            "workers": {"type": "object", "properties": {
              "replicas": {"type": "integer", "minimum": 0}}}}},
          "status": {"type": "object", "properties": {
            "phase": {"type": "string"}, "count": {"type": "integer"}}}}}}
    }]
  }
})";

class EmulatorTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    process_ =
        new Process({BinPath("antdt-kube-emulator"), "--listen", "127.0.0.1:0", "--ready-file",
                     dir_->File("ready"), "--bookmark-interval", "200ms", "--history", "50"},
                    dir_->File("emulator.log"));
    auto address = WaitForReadyFile(dir_->File("ready"), 30s);
    ASSERT_TRUE(address.has_value()) << "emulator did not start";
    address_ = *address;
    Reply crd =
        Call(address_, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", kCrd);
    ASSERT_EQ(crd.code, 201) << crd.body;
  }
  static void TearDownTestSuite() {
    process_->Signal(SIGTERM);
    auto status = process_->Wait(10s);
    EXPECT_TRUE(status.has_value() && WIFEXITED(*status) && WEXITSTATUS(*status) == 0)
        << "emulator did not stop cleanly on SIGTERM";
    delete process_;
    delete dir_;
  }

  static std::string Widgets(const std::string& ns) {
    return "/apis/test.antdt.io/v1/namespaces/" + ns + "/widgets";
  }
  static json Widget(const std::string& name, int size) {
    return {{"apiVersion", "test.antdt.io/v1"},
            {"kind", "Widget"},
            {"metadata", {{"name", name}}},
            {"spec", {{"size", size}}}};
  }
  static std::string Rv(const json& obj) { return obj["metadata"]["resourceVersion"]; }
  static Reply Fault(const json& body) {
    return Call(address_, "POST", "/emulator/v1/faults", body.dump());
  }

  static TempDir* dir_;
  static Process* process_;
  static std::string address_;
};
TempDir* EmulatorTest::dir_ = nullptr;
Process* EmulatorTest::process_ = nullptr;
std::string EmulatorTest::address_;

TEST_F(EmulatorTest, DiscoveryShowsTheCrdAndItIsEstablished) {
  Reply version = Call(address_, "GET", "/version");
  EXPECT_EQ(version.Json()["minor"], "30");
  Reply group = Call(address_, "GET", "/apis/test.antdt.io/v1");
  ASSERT_EQ(group.code, 200);
  bool found = false, status_sub = false;
  json resources = group.Json()["resources"];
  for (const json& r : resources) {
    if (r["name"] == "widgets") found = r["kind"] == "Widget" && r["namespaced"] == true;
    if (r["name"] == "widgets/status") status_sub = true;
  }
  EXPECT_TRUE(found && status_sub) << group.body;
  json crd = Call(address_, "GET",
                  "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.test.antdt.io")
                 .Json();
  bool established = false;
  for (const json& c : crd["status"]["conditions"]) {
    if (c["type"] == "Established") established = c["status"] == "True";
  }
  EXPECT_TRUE(established) << crd.dump();
  EXPECT_EQ(crd["status"]["storedVersions"], json::array({"v1"}));
}

// What kubectl reads before it writes: with these documents `kubectl apply`,
// `edit` and `replace` work without --validate=false (kubectl_test.sh runs them).
TEST_F(EmulatorTest, OpenApiDocumentsDescribeTheServedKinds) {
  Reply index = Call(address_, "GET", "/openapi/v3");
  ASSERT_EQ(index.code, 200) << index.body;
  const json paths = index.Json()["paths"];
  for (const char* gv : {"api/v1", "apis/apps/v1", "apis/test.antdt.io/v1"}) {
    EXPECT_TRUE(paths.contains(gv)) << gv << " missing from " << paths.dump();
  }
  const std::string url = paths["apis/test.antdt.io/v1"].value("serverRelativeURL", "");
  EXPECT_EQ(url.rfind("/openapi/v3/apis/test.antdt.io/v1?hash=", 0), 0u) << url;
  const json doc = Call(address_, "GET", url).Json();
  const json& patch =
      doc["paths"]["/apis/test.antdt.io/v1/namespaces/{namespace}/widgets/{name}"]["patch"];
  EXPECT_EQ(patch["x-kubernetes-group-version-kind"],
            json({{"group", "test.antdt.io"}, {"version", "v1"}, {"kind", "Widget"}}));
  auto params = [](const json& op) {
    std::set<std::string> names;
    for (const json& p : op.value("parameters", json::array())) names.insert(p.value("name", ""));
    return names;
  };
  // The server checks a custom resource's fields, so kubectl may leave it to the server.
  EXPECT_TRUE(params(patch).count("fieldValidation")) << patch.dump();
  const json& schema = doc["components"]["schemas"]["io.antdt.test.v1.Widget"];
  EXPECT_TRUE(schema["properties"]["spec"]["properties"].contains("size")) << schema.dump();
  // Built-in kinds are stored schemaless: their paths promise no field checks.
  const json core = Call(address_, "GET", "/openapi/v3/api/v1").Json();
  const json& pod_patch = core["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]["patch"];
  EXPECT_EQ(pod_patch["x-kubernetes-group-version-kind"]["kind"], "Pod");
  EXPECT_FALSE(params(pod_patch).count("fieldValidation")) << pod_patch.dump();
  EXPECT_EQ(Call(address_, "GET", "/openapi/v3/apis/nothing.example/v1").code, 404);

  // Swagger 2.0, as JSON and as the protobuf kubectl asks for.
  const json v2 = Call(address_, "GET", "/openapi/v2").Json();
  const json& def = v2["definitions"]["io.antdt.test.v1.Widget"];
  EXPECT_EQ(def["x-kubernetes-group-version-kind"][0]["kind"], "Widget") << def.dump();
  EXPECT_EQ(def["properties"]["spec"]["properties"]["workers"]["properties"]["replicas"]["type"],
            "integer");
  Reply pb = Call(address_, "GET", "/openapi/v2", "", "",
                  {{"Accept", "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"}});
  ASSERT_EQ(pb.code, 200) << pb.body;
  EXPECT_NE(pb.content_type.find("protobuf"), std::string::npos) << pb.content_type;
  EXPECT_NE(pb.body.find("io.antdt.test.v1.Widget"), std::string::npos);
  EXPECT_NE(pb.body.substr(0, 1), "{");
  EXPECT_EQ(Call(address_, "POST", "/openapi/v2", "{}").code, 405);
}

// `fieldValidation` on a custom resource's writes: Strict refuses unknown
// fields with the API server's strict-decoding message and stores nothing,
// Warn (the default) stores the pruned object with a Warning per field,
// Ignore says nothing.
TEST_F(EmulatorTest, FieldValidationRefusesWarnsOrIgnoresUnknownFields) {
  json w = Widget("fv", 1);
  w["spec"]["colour"] = "red";
  w["spec"]["parts"] = {{{"name", "a"}, {"weight", 2}}};
  w["metadata"]["bogus"] = 1;
  Reply strict = Call(address_, "POST", Widgets("fv") + "?fieldValidation=Strict", w.dump());
  EXPECT_EQ(strict.code, 400) << strict.body;
  EXPECT_EQ(strict.Json()["reason"], "BadRequest");
  const std::string message = strict.Json().value("message", "");
  EXPECT_NE(message.find("Widget in version \"v1\" cannot be handled as a Widget: strict "
                         "decoding error: "),
            std::string::npos)
      << message;
  for (const char* field : {"spec.colour", "spec.parts[0].weight", "metadata.bogus"}) {
    EXPECT_NE(message.find(std::string("unknown field \"") + field + "\""), std::string::npos)
        << field << ": " << message;
  }
  EXPECT_EQ(Call(address_, "GET", Widgets("fv") + "/fv").code, 404);

  Reply warn = Call(address_, "POST", Widgets("fv"), w.dump());
  ASSERT_EQ(warn.code, 201) << warn.body;
  EXPECT_EQ(warn.warnings.size(), 3u);
  EXPECT_NE(std::find(warn.warnings.begin(), warn.warnings.end(),
                      "299 - \"unknown field \\\"spec.colour\\\"\""),
            warn.warnings.end())
      << ::testing::PrintToString(warn.warnings);
  json stored = warn.Json();
  EXPECT_FALSE(stored["spec"].contains("colour"));
  EXPECT_EQ(stored["spec"]["parts"], json::array({{{"name", "a"}}}));

  json patch = {{"spec", {{"colour", "blue"}, {"size", 5}}}};
  Reply refused = Call(address_, "PATCH", Widgets("fv") + "/fv?fieldValidation=Strict",
                       patch.dump(), "application/merge-patch+json");
  EXPECT_EQ(refused.code, 400) << refused.body;
  EXPECT_EQ(Call(address_, "GET", Widgets("fv") + "/fv").Json()["spec"]["size"], 1);
  Reply ignored = Call(address_, "PATCH", Widgets("fv") + "/fv?fieldValidation=Ignore",
                       patch.dump(), "application/merge-patch+json");
  EXPECT_EQ(ignored.code, 200) << ignored.body;
  EXPECT_TRUE(ignored.warnings.empty());
  EXPECT_EQ(ignored.Json()["spec"]["size"], 5);
  EXPECT_FALSE(ignored.Json()["spec"].contains("colour"));

  Reply bad =
      Call(address_, "POST", Widgets("fv") + "?fieldValidation=Loose", Widget("fv2", 1).dump());
  EXPECT_EQ(bad.code, 400);
  EXPECT_NE(bad.body.find("fieldValidation"), std::string::npos) << bad.body;
  EXPECT_EQ(Call(address_, "GET", Widgets("fv") + "/fv2").code, 404);
}

// Server-side apply over HTTP: managedFields name who set what; an apply
// over another manager's value is a 409 Conflict naming manager and field
// (and stores nothing) until forced.
TEST_F(EmulatorTest, ServerSideApplyTracksManagersAndRefusesConflicts) {
  const std::string url = Widgets("ssa") + "/w1";
  const std::string config = R"({"apiVersion": "test.antdt.io/v1", "kind": "Widget",
      "metadata": {"name": "w1"}, "spec": {"size": 1}})";
  const char* kApply = "application/apply-patch+yaml";
  Reply created = Call(address_, "PATCH", url + "?fieldManager=platform", config, kApply);
  ASSERT_EQ(created.code, 201) << created.body;
  const json entry = created.Json()["metadata"]["managedFields"][0];
  EXPECT_EQ(entry["manager"], "platform");
  EXPECT_EQ(entry["operation"], "Apply");
  EXPECT_EQ(entry["fieldsV1"], json::parse(R"({"f:spec": {"f:size": {}}})"));
  Reply edited = Call(address_, "PATCH", url + "?fieldManager=oncall", R"({"spec": {"size": 2}})",
                      "application/merge-patch+json");
  ASSERT_EQ(edited.code, 200) << edited.body;
  const std::string rv = Rv(edited.Json());

  Reply conflict = Call(address_, "PATCH", url + "?fieldManager=platform", config, kApply);
  EXPECT_EQ(conflict.code, 409) << conflict.body;
  const json status = conflict.Json();
  EXPECT_EQ(status["reason"], "Conflict");
  EXPECT_NE(
      status.value("message", "")
          .find("Apply failed with 1 conflict: conflict with \"oncall\" using test.antdt.io/v1"),
      std::string::npos)
      << status.dump();
  EXPECT_EQ(status["details"]["causes"][0]["field"], ".spec.size");
  EXPECT_EQ(Rv(Call(address_, "GET", url).Json()), rv);  // nothing stored

  Reply forced = Call(address_, "PATCH", url + "?fieldManager=platform&force=true", config, kApply);
  ASSERT_EQ(forced.code, 200) << forced.body;
  EXPECT_EQ(forced.Json()["spec"]["size"], 1);
  std::set<std::string> managers;
  const json forced_object = forced.Json();
  for (const json& m : forced_object["metadata"]["managedFields"]) managers.insert(m["manager"]);
  EXPECT_EQ(managers, std::set<std::string>{"platform"});  // oncall's only field was taken
  // The same apply again changes nothing: no new resourceVersion.
  Reply again = Call(address_, "PATCH", url + "?fieldManager=platform", config, kApply);
  EXPECT_EQ(again.code, 200);
  EXPECT_EQ(Rv(again.Json()), Rv(forced.Json()));
}

TEST_F(EmulatorTest, CreateGetUpdateFollowResourceVersionAndGenerationRules) {
  Reply created = Call(address_, "POST", Widgets("crud"), Widget("a", 1).dump());
  ASSERT_EQ(created.code, 201) << created.body;
  json a = created.Json();
  EXPECT_EQ(a["metadata"]["generation"], 1);
  EXPECT_FALSE(a["metadata"]["uid"].get<std::string>().empty());
  EXPECT_EQ(a["metadata"]["creationTimestamp"].get<std::string>().size(), 20u);
  EXPECT_EQ(Call(address_, "POST", Widgets("crud"), Widget("a", 1).dump()).Json()["reason"],
            "AlreadyExists");

  // Spec change: generation and RV move.
  json update = a;
  update["spec"]["size"] = 2;
  Reply put = Call(address_, "PUT", Widgets("crud") + "/a", update.dump());
  ASSERT_EQ(put.code, 200) << put.body;
  json a2 = put.Json();
  EXPECT_EQ(a2["metadata"]["generation"], 2);
  EXPECT_GT(std::stoll(Rv(a2)), std::stoll(Rv(a)));

  // Stale RV: 409 Conflict with the apiserver's message.
  Reply stale = Call(address_, "PUT", Widgets("crud") + "/a", update.dump());
  EXPECT_EQ(stale.code, 409);
  EXPECT_EQ(stale.Json()["reason"], "Conflict");
  EXPECT_EQ(stale.Json()["message"],
            "Operation cannot be fulfilled on widgets.test.antdt.io \"a\": the object has been "
            "modified; please apply your changes to the latest version and try again");

  // Custom resources need the RV on PUT.
  json no_rv = a2;
  no_rv["metadata"].erase("resourceVersion");
  EXPECT_EQ(Call(address_, "PUT", Widgets("crud") + "/a", no_rv.dump()).code, 422);

  // Status write: generation unchanged.
  json status = a2;
  status["status"] = {{"phase", "Ready"}};
  Reply st = Call(address_, "PUT", Widgets("crud") + "/a/status", status.dump());
  ASSERT_EQ(st.code, 200) << st.body;
  EXPECT_EQ(st.Json()["metadata"]["generation"], 2);
  EXPECT_EQ(st.Json()["status"]["phase"], "Ready");

  // Schema validation: 422 naming the field.
  json bad = Widget("bad", 1);
  bad["spec"]["workers"]["replicas"] = -2;
  Reply invalid = Call(address_, "POST", Widgets("crud"), bad.dump());
  EXPECT_EQ(invalid.code, 422) << invalid.body;
  EXPECT_EQ(invalid.Json()["reason"], "Invalid");
  EXPECT_EQ(invalid.Json()["details"]["causes"][0]["field"], "spec.workers.replicas");
  EXPECT_EQ(invalid.Json()["message"].get<std::string>().rfind(
                "Widget.test.antdt.io \"bad\" is invalid: spec.workers.replicas: ", 0),
            0u)
      << invalid.body;

  // Bad names, namespace mismatch, missing objects.
  EXPECT_EQ(Call(address_, "POST", Widgets("crud"), Widget("Bad_Name", 1).dump()).code, 422);
  json other_ns = Widget("b", 1);
  other_ns["metadata"]["namespace"] = "elsewhere";
  EXPECT_EQ(Call(address_, "POST", Widgets("crud"), other_ns.dump()).code, 400);
  EXPECT_EQ(Call(address_, "GET", Widgets("crud") + "/missing").Json()["reason"], "NotFound");
  EXPECT_EQ(
      Call(address_, "PATCH", Widgets("crud") + "/missing", "{}", "application/merge-patch+json")
          .code,
      404);

  // generateName.
  json gen = Widget("", 1);
  gen["metadata"] = {{"generateName", "w-"}};
  Reply generated = Call(address_, "POST", Widgets("crud"), gen.dump());
  ASSERT_EQ(generated.code, 201);
  EXPECT_EQ(generated.Json()["metadata"]["name"].get<std::string>().size(), 7u);
}

TEST_F(EmulatorTest, PatchTypesAndPreconditions) {
  ASSERT_EQ(Call(address_, "POST", Widgets("patch"), Widget("p", 1).dump()).code, 201);
  Reply merge = Call(address_, "PATCH", Widgets("patch") + "/p", R"({"spec":{"size":5}})",
                     "application/merge-patch+json; charset=utf-8");
  ASSERT_EQ(merge.code, 200) << merge.body;
  EXPECT_EQ(merge.Json()["spec"]["size"], 5);
  EXPECT_EQ(merge.Json()["metadata"]["generation"], 2);
  Reply jp =
      Call(address_, "PATCH", Widgets("patch") + "/p",
           R"([{"op":"replace","path":"/spec/size","value":6}])", "application/json-patch+json");
  ASSERT_EQ(jp.code, 200) << jp.body;
  EXPECT_EQ(jp.Json()["spec"]["size"], 6);
  EXPECT_EQ(Call(address_, "PATCH", Widgets("patch") + "/p", R"({"spec":{"size":7}})",
                 "application/strategic-merge-patch+json")
                .code,
            415);
  // An RV inside the patch is a precondition.
  Reply stale = Call(address_, "PATCH", Widgets("patch") + "/p",
                     R"({"metadata":{"resourceVersion":"1"},"spec":{"size":8}})",
                     "application/merge-patch+json");
  EXPECT_EQ(stale.code, 409);
  // Apply: fieldManager required; creates when absent.
  EXPECT_EQ(Call(address_, "PATCH", Widgets("patch") + "/q", Widget("q", 1).dump(),
                 "application/apply-patch+yaml")
                .code,
            400);
  Reply applied = Call(address_, "PATCH", Widgets("patch") + "/q?fieldManager=test",
                       "apiVersion: test.antdt.io/v1\nkind: Widget\nmetadata:\n  name: q\n"
                       "spec:\n  size: 3\n",
                       "application/apply-patch+yaml");
  EXPECT_EQ(applied.code, 201) << applied.body;
  EXPECT_EQ(applied.Json()["spec"]["size"], 3);
  // dryRun=All does not persist.
  Reply dry = Call(address_, "PATCH", Widgets("patch") + "/q?dryRun=All", R"({"spec":{"size":9}})",
                   "application/merge-patch+json");
  EXPECT_EQ(dry.code, 200);
  EXPECT_EQ(Call(address_, "GET", Widgets("patch") + "/q").Json()["spec"]["size"], 3);
}

TEST_F(EmulatorTest, NoOpWriteBumpsNothingAndEmitsNoEvent) {
  json w = Call(address_, "POST", Widgets("noop"), Widget("n", 1).dump()).Json();
  WatchStream watch(address_, Widgets("noop") + "?watch=1&resourceVersion=" + Rv(w));
  ASSERT_EQ(watch.status(), 200);
  Reply same = Call(address_, "PUT", Widgets("noop") + "/n", w.dump());
  ASSERT_EQ(same.code, 200);
  EXPECT_EQ(Rv(same.Json()), Rv(w));
  Reply same_patch = Call(address_, "PATCH", Widgets("noop") + "/n", R"({"spec":{"size":1}})",
                          "application/merge-patch+json");
  EXPECT_EQ(Rv(same_patch.Json()), Rv(w));
  Reply change = Call(address_, "PATCH", Widgets("noop") + "/n", R"({"spec":{"size":2}})",
                      "application/merge-patch+json");
  auto e = watch.NextChange();
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ((*e)["type"], "MODIFIED");
  EXPECT_EQ((*e)["object"]["spec"]["size"], 2) << "the no-op writes produced an event";
  EXPECT_EQ(Rv((*e)["object"]), Rv(change.Json()));
}

TEST_F(EmulatorTest, WatchSyntheticAddedReplayAndBookmarks) {
  json a = Call(address_, "POST", Widgets("replay"), Widget("a", 1).dump()).Json();
  Call(address_, "POST", Widgets("replay"), Widget("b", 1).dump());
  {
    WatchStream watch(address_, Widgets("replay") + "?watch=true");
    auto first = watch.NextChange();
    auto second = watch.NextChange();
    ASSERT_TRUE(first && second);
    EXPECT_EQ((*first)["type"], "ADDED");
    EXPECT_EQ((*first)["object"]["metadata"]["name"], "a");
    EXPECT_EQ((*second)["object"]["metadata"]["name"], "b");
  }
  Call(address_, "PATCH", Widgets("replay") + "/a", R"({"spec":{"size":2}})",
       "application/merge-patch+json");
  Call(address_, "DELETE", Widgets("replay") + "/b");
  WatchStream watch(
      address_, Widgets("replay") + "?watch=1&allowWatchBookmarks=true&resourceVersion=" + Rv(a));
  auto added_b = watch.NextChange();
  auto modified = watch.NextChange();
  auto deleted = watch.NextChange();
  ASSERT_TRUE(added_b && modified && deleted);
  EXPECT_EQ((*added_b)["type"], "ADDED");
  EXPECT_EQ((*modified)["type"], "MODIFIED");
  EXPECT_EQ((*modified)["object"]["spec"]["size"], 2);
  EXPECT_EQ((*deleted)["type"], "DELETED");
  EXPECT_EQ((*deleted)["object"]["metadata"]["name"], "b");
  EXPECT_GT(std::stoll(Rv((*deleted)["object"])), std::stoll(Rv((*modified)["object"])));
  bool bookmark = false;
  for (int i = 0; i < 5 && !bookmark; ++i) {
    auto e = watch.Next();
    ASSERT_TRUE(e.has_value());
    bookmark = (*e)["type"] == "BOOKMARK";
    if (bookmark) {
      EXPECT_EQ((*e)["object"]["kind"], "Widget");
      EXPECT_FALSE(Rv((*e)["object"]).empty());
    }
  }
  EXPECT_TRUE(bookmark);
}

TEST_F(EmulatorTest, WatchTimeoutEndsCleanly) {
  WatchStream watch(address_, Widgets("timeout") + "?watch=1&timeoutSeconds=1");
  EXPECT_TRUE(watch.WaitEnd(20s));
  EXPECT_TRUE(watch.ended());
}

TEST_F(EmulatorTest, ExpiredWatchesAndCompactedHistoryGive410) {
  json w = Call(address_, "POST", Widgets("expire"), Widget("e", 1).dump()).Json();
  std::string old_rv = Rv(w);
  WatchStream live(address_, Widgets("expire") + "?watch=1&resourceVersion=" + old_rv);
  ASSERT_EQ(live.status(), 200);
  Call(address_, "PATCH", Widgets("expire") + "/e", R"({"spec":{"size":2}})",
       "application/merge-patch+json");
  auto modified = live.NextChange();
  ASSERT_TRUE(modified.has_value());
  EXPECT_EQ((*modified)["type"], "MODIFIED");
  ASSERT_EQ(Fault({{"expireWatches", true}}).code, 200);
  auto error = live.NextChange();
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ((*error)["type"], "ERROR");
  EXPECT_EQ((*error)["object"]["code"], 410);
  EXPECT_EQ((*error)["object"]["reason"], "Expired");
  EXPECT_TRUE(live.WaitEnd());
  EXPECT_TRUE(live.ended());

  // A watch from before the compaction: 200, then one ERROR 410, then the end.
  WatchStream again(address_, Widgets("expire") + "?watch=1&resourceVersion=" + old_rv);
  EXPECT_EQ(again.status(), 200);
  auto e = again.Next();
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ((*e)["type"], "ERROR");
  EXPECT_EQ((*e)["object"]["code"], 410);
  EXPECT_EQ(
      (*e)["object"]["message"].get<std::string>().rfind("too old resource version: " + old_rv, 0),
      0u);
  EXPECT_TRUE(again.WaitEnd());
  EXPECT_FALSE(again.Next(100ms).has_value());
  // An exact list at an old RV: HTTP 410.
  Reply list =
      Call(address_, "GET",
           Widgets("expire") + "?resourceVersion=" + old_rv + "&resourceVersionMatch=Exact");
  EXPECT_EQ(list.code, 410);
  EXPECT_EQ(list.Json()["reason"], "Expired");
}

TEST_F(EmulatorTest, DroppedWatchEndsWithoutTerminatingChunk) {
  WatchStream watch(address_, Widgets("drop") + "?watch=1");
  ASSERT_EQ(watch.status(), 200);
  ASSERT_TRUE(
      WaitFor([] { return !Call(address_, "GET", "/emulator/v1/watches").Json().empty(); }, 10s));
  ASSERT_EQ(Fault({{"dropWatches", true}}).code, 200);
  EXPECT_TRUE(watch.WaitEnd());
  EXPECT_TRUE(watch.aborted());
}

TEST_F(EmulatorTest, SelectorTransitionsAreAddedAndDeleted) {
  const std::string cms = "/api/v1/namespaces/select/configmaps";
  WatchStream watch(address_, cms + "?watch=1&labelSelector=app%3Dx");
  ASSERT_EQ(watch.status(), 200);
  ASSERT_EQ(Call(address_, "POST", cms, R"({"metadata":{"name":"c"},"data":{"k":"v"}})").code, 201);
  Call(address_, "PATCH", cms + "/c", R"({"metadata":{"labels":{"app":"x"}}})",
       "application/merge-patch+json");
  Call(address_, "PATCH", cms + "/c", R"({"data":{"k":"w"}})", "application/merge-patch+json");
  Call(address_, "PATCH", cms + "/c", R"({"metadata":{"labels":{"app":"y"}}})",
       "application/strategic-merge-patch+json");
  auto added = watch.NextChange();
  auto modified = watch.NextChange();
  auto deleted = watch.NextChange();
  ASSERT_TRUE(added && modified && deleted);
  EXPECT_EQ((*added)["type"], "ADDED");
  EXPECT_EQ((*modified)["type"], "MODIFIED");
  EXPECT_EQ((*deleted)["type"], "DELETED");
  EXPECT_EQ((*deleted)["object"]["metadata"]["labels"]["app"], "y");

  // Set-based selectors and lists.
  Call(address_, "POST", cms, R"({"metadata":{"name":"d","labels":{"tier":"db"}}})");
  auto names = [&](const std::string& selector) {
    std::vector<std::string> out;
    json items = Call(address_, "GET", cms + "?labelSelector=" + selector).Json()["items"];
    for (const json& i : items) {
      out.push_back(i["metadata"]["name"]);
    }
    return out;
  };
  EXPECT_EQ(names("tier%20in%20(db,web)"), std::vector<std::string>{"d"});
  EXPECT_EQ(names("tier%20notin%20(db)"), std::vector<std::string>{"c"});
  EXPECT_EQ(names("!tier"), std::vector<std::string>{"c"});
  EXPECT_EQ(names("app!%3Dy"), std::vector<std::string>{"d"});
  json list = Call(address_, "GET", cms + "?fieldSelector=metadata.name%3Dd").Json();
  ASSERT_EQ(list["items"].size(), 1u);
  EXPECT_EQ(list["kind"], "ConfigMapList");
  EXPECT_FALSE(list["metadata"]["resourceVersion"].get<std::string>().empty());
}

TEST_F(EmulatorTest, StatusSubresourceIsolation) {
  json w = Call(address_, "POST", Widgets("status"), Widget("s", 1).dump()).Json();
  json with_status = w;
  with_status["status"] = {{"phase", "Running"}};
  json after = Call(address_, "PUT", Widgets("status") + "/s", with_status.dump()).Json();
  EXPECT_FALSE(after.contains("status")) << "main resource PUT changed status";
  EXPECT_EQ(Rv(after), Rv(w)) << "an ignored status change is a no-op";
  json status_write = after;
  status_write["status"] = {{"phase", "Running"}};
  status_write["spec"]["size"] = 99;
  json st = Call(address_, "PUT", Widgets("status") + "/s/status", status_write.dump()).Json();
  EXPECT_EQ(st["status"]["phase"], "Running");
  EXPECT_EQ(st["spec"]["size"], 1) << "/status PUT changed spec";
  EXPECT_EQ(st["metadata"]["generation"], 1);
  Reply patch = Call(address_, "PATCH", Widgets("status") + "/s/status",
                     R"({"status":{"count":3}})", "application/merge-patch+json");
  EXPECT_EQ(patch.Json()["status"]["count"], 3);
  EXPECT_EQ(patch.Json()["status"]["phase"], "Running");
}

TEST_F(EmulatorTest, FinalizersHoldDeletionUntilRemoved) {
  json w = Widget("f", 1);
  w["metadata"]["finalizers"] = {"antdt.io/cleanup"};
  json created = Call(address_, "POST", Widgets("fin"), w.dump()).Json();
  WatchStream watch(address_, Widgets("fin") + "?watch=1&resourceVersion=" + Rv(created));
  Reply del = Call(address_, "DELETE", Widgets("fin") + "/f");
  ASSERT_EQ(del.code, 200);
  json deleting = del.Json();
  EXPECT_EQ(deleting["kind"], "Widget");
  EXPECT_TRUE(deleting["metadata"].contains("deletionTimestamp"));
  EXPECT_EQ(deleting["metadata"]["generation"], 2);
  // A second DELETE is idempotent.
  json again = Call(address_, "DELETE", Widgets("fin") + "/f").Json();
  EXPECT_EQ(again["metadata"]["deletionTimestamp"], deleting["metadata"]["deletionTimestamp"]);
  // No new finalizers while deleting.
  Reply add = Call(address_, "PATCH", Widgets("fin") + "/f",
                   R"({"metadata":{"finalizers":["antdt.io/cleanup","antdt.io/other"]}})",
                   "application/merge-patch+json");
  EXPECT_EQ(add.code, 422) << add.body;
  // Removing the last finalizer deletes the object.
  Reply remove = Call(address_, "PATCH", Widgets("fin") + "/f",
                      R"({"metadata":{"finalizers":null}})", "application/merge-patch+json");
  EXPECT_EQ(remove.code, 200) << remove.body;
  EXPECT_EQ(Call(address_, "GET", Widgets("fin") + "/f").code, 404);
  auto modified = watch.NextChange();
  auto gone = watch.NextChange();
  ASSERT_TRUE(modified && gone);
  EXPECT_EQ((*modified)["type"], "MODIFIED");
  EXPECT_EQ((*gone)["type"], "DELETED");
  EXPECT_FALSE(watch.NextChange(500ms).has_value());
  // Preconditions.
  json p = Call(address_, "POST", Widgets("fin"), Widget("pre", 1).dump()).Json();
  Reply wrong =
      Call(address_, "DELETE", Widgets("fin") + "/pre",
           R"({"kind":"DeleteOptions","apiVersion":"v1","preconditions":{"uid":"nope"}})");
  EXPECT_EQ(wrong.code, 409);
  Reply right = Call(address_, "DELETE", Widgets("fin") + "/pre",
                     json{{"preconditions", {{"uid", p["metadata"]["uid"]}}}}.dump());
  EXPECT_EQ(right.code, 200);
  EXPECT_EQ(right.Json()["status"], "Success");
}

TEST_F(EmulatorTest, PodBindingAndGracefulDeletion) {
  const std::string pods = "/api/v1/namespaces/pods/pods";
  Reply created =
      Call(address_, "POST", pods,
           R"({"metadata":{"name":"p"},"spec":{"containers":[{"name":"c","image":"x"}]}})");
  ASSERT_EQ(created.code, 201) << created.body;
  EXPECT_EQ(created.Json()["status"]["phase"], "Pending");
  const std::string binding = R"({"kind":"Binding","apiVersion":"v1","metadata":{"name":"p"},
                                  "target":{"kind":"Node","name":"node-1"}})";
  EXPECT_EQ(Call(address_, "POST", pods + "/p/binding", binding).code, 201);
  EXPECT_EQ(Call(address_, "POST", pods + "/p/binding", binding).code, 409);
  json pod = Call(address_, "GET", pods + "/p").Json();
  EXPECT_EQ(pod["spec"]["nodeName"], "node-1");
  json on_node = Call(address_, "GET", pods + "?fieldSelector=spec.nodeName%3Dnode-1").Json();
  EXPECT_EQ(on_node["items"].size(), 1u);
  EXPECT_EQ(
      Call(address_, "GET", pods + "?fieldSelector=spec.nodeName%3Dnode-2").Json()["items"].size(),
      0u);
  // Status isolation on pods.
  json st = pod;
  st["status"]["phase"] = "Running";
  st["spec"]["nodeName"] = "elsewhere";
  json after = Call(address_, "PUT", pods + "/p/status", st.dump()).Json();
  EXPECT_EQ(after["status"]["phase"], "Running");
  EXPECT_EQ(after["spec"]["nodeName"], "node-1");
  // Bound pod: DELETE only marks it; the kubelet's grace-0 DELETE removes it.
  Reply del = Call(address_, "DELETE", pods + "/p");
  ASSERT_EQ(del.code, 200);
  EXPECT_EQ(del.Json()["metadata"]["deletionGracePeriodSeconds"], 30);
  EXPECT_EQ(Call(address_, "GET", pods + "/p").code, 200);
  Reply force = Call(address_, "DELETE", pods + "/p", R"({"gracePeriodSeconds":0})");
  EXPECT_EQ(force.code, 200);
  EXPECT_EQ(Call(address_, "GET", pods + "/p").code, 404);
  // Unbound pod: removed at once.
  Call(address_, "POST", pods, R"({"metadata":{"name":"u"},"spec":{}})");
  EXPECT_EQ(Call(address_, "DELETE", pods + "/u").Json()["status"], "Success");
  EXPECT_EQ(Call(address_, "GET", pods + "/u").code, 404);
}

TEST_F(EmulatorTest, OwnedObjectsAreGarbageCollected) {
  json owner = Call(address_, "POST", Widgets("gc"), Widget("owner", 1).dump()).Json();
  json cm = {{"metadata",
              {{"name", "child"},
               {"ownerReferences",
                {{{"apiVersion", "test.antdt.io/v1"},
                  {"kind", "Widget"},
                  {"name", "owner"},
                  {"uid", owner["metadata"]["uid"]},
                  {"controller", true}}}}}}};
  const std::string cms = "/api/v1/namespaces/gc/configmaps";
  ASSERT_EQ(Call(address_, "POST", cms, cm.dump()).code, 201);
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(Call(address_, "GET", cms + "/child").code, 200) << "GC deleted a live owner's child";
  ASSERT_EQ(Call(address_, "DELETE", Widgets("gc") + "/owner").code, 200);
  EXPECT_TRUE(WaitFor([&] { return Call(address_, "GET", cms + "/child").code == 404; }, 20s));
}

TEST_F(EmulatorTest, DeletingTheCrdDeletesItsResources) {
  std::string crd = kCrd;
  json def = json::parse(crd);
  def["metadata"]["name"] = "gadgets.test.antdt.io";
  def["spec"]["names"] = {{"kind", "Gadget"}, {"plural", "gadgets"}};
  ASSERT_EQ(
      Call(address_, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", def.dump())
          .code,
      201);
  const std::string gadgets = "/apis/test.antdt.io/v1/namespaces/crd/gadgets";
  ASSERT_EQ(Call(address_, "POST", gadgets, R"({"metadata":{"name":"g"},"spec":{}})").code, 201);
  ASSERT_EQ(Call(address_, "DELETE",
                 "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/gadgets.test.antdt.io")
                .code,
            200);
  EXPECT_EQ(Call(address_, "GET", gadgets).code, 404);
  EXPECT_EQ(Call(address_, "GET", Widgets("crd")).code, 200) << "the other CRD went too";
}

TEST_F(EmulatorTest, TableOutputUsesPrinterColumns) {
  json w = Widget("t", 1);
  w["spec"]["workers"]["replicas"] = 4;
  Call(address_, "POST", Widgets("table"), w.dump());
  Reply table = Call(address_, "GET", Widgets("table"), "", "",
                     {{"Accept", "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"}});
  json t = table.Json();
  EXPECT_EQ(t["kind"], "Table") << table.body;
  ASSERT_EQ(t["rows"].size(), 1u);
  EXPECT_EQ(t["columnDefinitions"][1]["name"], "Replicas");
  EXPECT_EQ(t["rows"][0]["cells"][0], "t");
}

// `kubectl get pods` (and nodes, services, claims) shows the columns the API
// server prints: READY, STATUS, RESTARTS from the containers' statuses.
TEST_F(EmulatorTest, BuiltinKindsHaveTheirTables) {
  const std::string pods = "/api/v1/namespaces/default/pods";
  json pod = {{"metadata", {{"name", "p"}}},
              {"spec",
               {{"containers", json::array({{{"name", "a"}, {"image", "x"}},
                                            {{"name", "b"}, {"image", "x"}}})}}}};
  ASSERT_EQ(Call(address_, "POST", pods, pod.dump()).code, 201);
  json status = Call(address_, "GET", pods + "/p").Json();
  status["status"] = {
      {"phase", "Running"},
      {"podIP", "10.0.0.7"},
      {"containerStatuses",
       json::array({{{"name", "a"}, {"ready", true}, {"restartCount", 2}},
                    {{"name", "b"},
                     {"ready", false},
                     {"restartCount", 1},
                     {"state", {{"waiting", {{"reason", "CrashLoopBackOff"}}}}}}})}};
  ASSERT_EQ(Call(address_, "PUT", pods + "/p/status", status.dump()).code, 200);
  const std::vector<std::pair<std::string, std::string>> accept = {
      {"Accept", "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"}};
  json t = Call(address_, "GET", pods, "", "", accept).Json();
  ASSERT_EQ(t["kind"], "Table") << t.dump();
  std::vector<std::string> names;
  for (const json& c : t["columnDefinitions"]) names.push_back(c["name"]);
  EXPECT_EQ(names,
            (std::vector<std::string>{"Name", "Ready", "Status", "Restarts", "Age", "IP", "Node"}));
  ASSERT_EQ(t["rows"].size(), 1u);
  const json& cells = t["rows"][0]["cells"];
  EXPECT_EQ(cells[0], "p");
  EXPECT_EQ(cells[1], "1/2");
  EXPECT_EQ(cells[2], "CrashLoopBackOff");
  EXPECT_EQ(cells[3], 3);
  EXPECT_EQ(cells[5], "10.0.0.7");
  EXPECT_EQ(cells[6], "<none>");
  // One object, and the other built-ins.
  EXPECT_EQ(Call(address_, "GET", pods + "/p", "", "", accept).Json()["rows"].size(), 1u);
  json svc = {{"metadata", {{"name", "s"}}},
              {"spec", {{"ports", json::array({{{"port", 80}, {"protocol", "TCP"}}})}}}};
  ASSERT_EQ(Call(address_, "POST", "/api/v1/namespaces/default/services", svc.dump()).code, 201);
  t = Call(address_, "GET", "/api/v1/namespaces/default/services", "", "", accept).Json();
  EXPECT_EQ(t["columnDefinitions"][4]["name"], "Port(s)");
  EXPECT_EQ(t["rows"][0]["cells"][4], "80/TCP");
  json pvc = {{"metadata", {{"name", "c"}}},
              {"spec", {{"accessModes", json::array({"ReadWriteOnce"})}}}};
  ASSERT_EQ(
      Call(address_, "POST", "/api/v1/namespaces/default/persistentvolumeclaims", pvc.dump()).code,
      201);
  t = Call(address_, "GET", "/api/v1/namespaces/default/persistentvolumeclaims", "", "", accept)
          .Json();
  EXPECT_EQ(t["rows"][0]["cells"][1], "Pending");
}

TEST_F(EmulatorTest, InjectedFaults) {
  json w = Call(address_, "POST", Widgets("faults"), Widget("x", 1).dump()).Json();
  ASSERT_EQ(Fault({{"inject",
                    {{"code", 429}, {"count", 1}, {"verbs", {"PUT"}}, {"retryAfterSeconds", 2}}}})
                .code,
            200);
  Reply throttled = Call(address_, "PUT", Widgets("faults") + "/x", w.dump());
  EXPECT_EQ(throttled.code, 429);
  EXPECT_EQ(throttled.retry_after, "2");
  EXPECT_EQ(throttled.Json()["reason"], "TooManyRequests");
  EXPECT_EQ(throttled.Json()["details"]["retryAfterSeconds"], 2);
  EXPECT_EQ(Call(address_, "PUT", Widgets("faults") + "/x", w.dump()).code, 200);

  ASSERT_EQ(Fault({{"inject",
                    {{"code", 409}, {"count", 2}, {"verbs", {"PATCH"}}, {"pathContains", "/x"}}}})
                .code,
            200);
  for (int i = 0; i < 2; ++i) {
    Reply conflict = Call(address_, "PATCH", Widgets("faults") + "/x", R"({"spec":{"size":4}})",
                          "application/merge-patch+json");
    EXPECT_EQ(conflict.code, 409);
    EXPECT_EQ(conflict.Json()["reason"], "Conflict");
  }
  EXPECT_EQ(Call(address_, "PATCH", Widgets("faults") + "/x", R"({"spec":{"size":4}})",
                 "application/merge-patch+json")
                .code,
            200);
  ASSERT_EQ(Fault({{"inject", {{"code", 503}, {"count", 1}, {"verbs", {"LIST"}}}}}).code, 200);
  EXPECT_EQ(Call(address_, "GET", Widgets("faults")).code, 503);
  EXPECT_EQ(Call(address_, "DELETE", "/emulator/v1/faults").code, 200);

  json requests = Call(address_, "GET", "/emulator/v1/requests").Json();
  ASSERT_TRUE(requests.is_array());
  bool saw_merge_patch = false;
  for (const json& r : requests) {
    if (r["method"] == "PATCH" && r["contentType"] == "application/merge-patch+json") {
      saw_merge_patch = true;
    }
  }
  EXPECT_TRUE(saw_merge_patch);
}

TEST_F(EmulatorTest, SendInitialEventsIsRejected) {
  Reply r = Call(address_, "GET", Widgets("x") + "?watch=1&sendInitialEvents=true");
  EXPECT_EQ(r.code, 422);
}

// Polls `path` until `pred` holds for its JSON (10 s).
bool EventuallyJson(const std::string& address, const std::string& path,
                    const std::function<bool(const json&)>& pred, json* last = nullptr) {
  for (int i = 0; i < 200; ++i) {
    Reply r = Call(address, "GET", path);
    if (last != nullptr) *last = r.Json();
    if (r.code == 200 && pred(r.Json())) return true;
    std::this_thread::sleep_for(50ms);
  }
  return false;
}

TEST_F(EmulatorTest, DeploymentsAndDaemonSetsMakeTheirPods) {
  // Three nodes: one tainted (the agent tolerates it), one without the label
  // the Deployment's pods select.
  for (const char* node : {R"({"metadata": {"name": "n1", "labels": {"pool": "a"}}})",
                           R"({"metadata": {"name": "n2", "labels": {"pool": "a"}},
               "spec": {"taints": [{"key": "gpu", "effect": "NoSchedule"}]}})",
                           R"({"metadata": {"name": "n3", "labels": {"pool": "b"}}})"}) {
    ASSERT_EQ(Call(address_, "POST", "/api/v1/nodes", node).code, 201);
  }
  Reply created = Call(address_, "POST", "/apis/apps/v1/namespaces/wl/deployments", R"({
    "metadata": {"name": "op"},
    "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "op"}},
             "template": {"metadata": {"labels": {"app": "op"}},
                          "spec": {"containers": [{"name": "c", "image": "i:1"}]}}}})");
  ASSERT_EQ(created.code, 201) << created.body;
  json pods;
  ASSERT_TRUE(EventuallyJson(
      address_, "/api/v1/namespaces/wl/pods?labelSelector=app%3Dop",
      [](const json& l) { return l["items"].size() == 2; }, &pods))
      << pods.dump();
  json rs = Call(address_, "GET", "/apis/apps/v1/namespaces/wl/replicasets").Json()["items"];
  ASSERT_EQ(rs.size(), 1u);
  const std::string hash = rs[0]["metadata"]["labels"]["pod-template-hash"];
  EXPECT_EQ(rs[0]["metadata"]["name"], "op-" + hash);
  EXPECT_EQ(rs[0]["metadata"]["ownerReferences"][0]["kind"], "Deployment");
  for (const json& p : pods["items"]) {
    EXPECT_EQ(p["metadata"]["ownerReferences"][0]["kind"], "ReplicaSet");
    EXPECT_EQ(p["metadata"]["labels"]["pod-template-hash"], hash);
    EXPECT_EQ(p["spec"]["containers"][0]["image"], "i:1");
  }
  // Not available until the pods are Ready (a kubelet's word); then rolled out.
  json d = Call(address_, "GET", "/apis/apps/v1/namespaces/wl/deployments/op").Json();
  EXPECT_EQ(d["status"]["availableReplicas"], 0);
  for (const json& p : pods["items"]) {
    json ready = p;
    ready["status"]["conditions"] = json::parse(R"([{"type": "Ready", "status": "True"}])");
    const std::string name = p["metadata"]["name"];
    ASSERT_EQ(
        Call(address_, "PUT", "/api/v1/namespaces/wl/pods/" + name + "/status", ready.dump()).code,
        200);
  }
  ASSERT_TRUE(EventuallyJson(
      address_, "/apis/apps/v1/namespaces/wl/deployments/op",
      [](const json& dep) {
        return dep["status"].value("availableReplicas", 0) == 2 &&
               dep["status"].value("updatedReplicas", 0) == 2 &&
               dep["status"]["conditions"][0]["status"] == "True" &&
               dep["status"]["conditions"][1]["reason"] == "NewReplicaSetAvailable";
      },
      &d))
      << d.dump();
  EXPECT_EQ(d["status"]["observedGeneration"], 1);
  // A new template: a new ReplicaSet, the old one scaled to 0, its pods gone.
  d["spec"]["template"]["spec"]["containers"][0]["image"] = "i:2";
  ASSERT_EQ(Call(address_, "PUT", "/apis/apps/v1/namespaces/wl/deployments/op", d.dump()).code,
            200);
  ASSERT_TRUE(EventuallyJson(
      address_, "/api/v1/namespaces/wl/pods?labelSelector=app%3Dop",
      [](const json& l) {
        if (l["items"].size() != 2) return false;
        for (const json& p : l["items"]) {
          if (p["spec"]["containers"][0]["image"] != "i:2") return false;
        }
        return true;
      },
      &pods))
      << pods.dump();
  rs = Call(address_, "GET", "/apis/apps/v1/namespaces/wl/replicasets").Json()["items"];
  ASSERT_EQ(rs.size(), 2u);
  int scaled_down = 0;
  for (const json& r : rs) scaled_down += r["spec"]["replicas"] == 0;
  EXPECT_EQ(scaled_down, 1);

  // A DaemonSet tolerating the taint, on the nodes of pool a.
  ASSERT_EQ(Call(address_, "POST", "/apis/apps/v1/namespaces/wl/daemonsets", R"({
    "metadata": {"name": "agent"},
    "spec": {"selector": {"matchLabels": {"app": "agent"}},
             "template": {"metadata": {"labels": {"app": "agent"}},
                          "spec": {"nodeSelector": {"pool": "a"},
                                   "tolerations": [{"operator": "Exists"}],
                                   "containers": [{"name": "a", "image": "i:1"}]}}}})")
                .code,
            201);
  ASSERT_TRUE(EventuallyJson(
      address_, "/api/v1/namespaces/wl/pods?labelSelector=app%3Dagent",
      [](const json& l) { return l["items"].size() == 2; }, &pods))
      << pods.dump();
  std::set<std::string> on;
  for (const json& p : pods["items"]) on.insert(p["spec"]["nodeName"].get<std::string>());
  EXPECT_EQ(on, (std::set<std::string>{"n1", "n2"}));
  json ds;
  ASSERT_TRUE(EventuallyJson(
      address_, "/apis/apps/v1/namespaces/wl/daemonsets/agent",
      [](const json& x) {
        return x["status"].value("desiredNumberScheduled", 0) == 2 &&
               x["status"].value("currentNumberScheduled", 0) == 2;
      },
      &ds))
      << ds.dump();
  EXPECT_EQ(ds["status"]["currentNumberScheduled"], 2);
  EXPECT_EQ(ds["status"]["numberReady"], 0);  // no kubelet here

  // Pod Security refuses the ReplicaSet's pods: a FailedCreate Warning on it.
  ASSERT_EQ(Call(address_, "POST", "/api/v1/namespaces", R"({"metadata": {"name": "locked",
              "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}})")
                .code,
            201);
  ASSERT_EQ(Call(address_, "POST", "/apis/apps/v1/namespaces/locked/deployments", R"({
    "metadata": {"name": "loose"},
    "spec": {"selector": {"matchLabels": {"app": "loose"}},
             "template": {"metadata": {"labels": {"app": "loose"}},
                          "spec": {"containers": [{"name": "c", "image": "i"}]}}}})")
                .code,
            201);
  json events;
  ASSERT_TRUE(EventuallyJson(
      address_, "/api/v1/namespaces/locked/events",
      [](const json& l) {
        for (const json& e : l["items"]) {
          if (e["reason"] == "FailedCreate") return true;
        }
        return false;
      },
      &events))
      << events.dump();
  const json& e = events["items"][0];
  EXPECT_EQ(e["type"], "Warning");
  EXPECT_EQ(e["involvedObject"]["kind"], "ReplicaSet");
  EXPECT_NE(e["message"].get<std::string>().find("violates PodSecurity \"restricted:latest\""),
            std::string::npos);
}

TEST(EmulatorAuthTest, BearerTokenFromARotatingFile) {
  TempDir dir;
  { std::ofstream(dir.File("token")) << "first\n"; }
  Process process({BinPath("antdt-kube-emulator"), "--listen", "127.0.0.1:0", "--ready-file",
                   dir.File("ready"), "--token-file", dir.File("token"), "--no-gc"},
                  dir.File("emulator.log"));
  auto address = WaitForReadyFile(dir.File("ready"), 30s);
  ASSERT_TRUE(address.has_value());
  EXPECT_EQ(Call(*address, "GET", "/version").code, 200);
  EXPECT_EQ(Call(*address, "GET", "/api/v1/namespaces").code, 401);
  EXPECT_EQ(
      Call(*address, "GET", "/api/v1/namespaces", "", "", {{"Authorization", "Bearer first"}}).code,
      200);
  { std::ofstream(dir.File("token")) << "second\n"; }
  EXPECT_EQ(
      Call(*address, "GET", "/api/v1/namespaces", "", "", {{"Authorization", "Bearer first"}}).code,
      401);
  EXPECT_EQ(
      Call(*address, "GET", "/api/v1/namespaces", "", "", {{"Authorization", "Bearer second"}})
          .code,
      200);
}

TEST(EmulatorRbacTest, ServiceAccountTokensAndRolesDecideEveryRequest) {
  TempDir dir;
  Process process(
      {BinPath("antdt-kube-emulator"), "--listen", "127.0.0.1:0", "--ready-file", dir.File("ready"),
       "--token", "admin-token", "--authorization-mode", "RBAC", "--no-gc"},
      dir.File("emulator.log"));
  auto address = WaitForReadyFile(dir.File("ready"), 30s);
  ASSERT_TRUE(address.has_value());
  const std::vector<std::pair<std::string, std::string>> admin = {
      {"Authorization", "Bearer admin-token"}};
  auto as_admin = [&](const std::string& method, const std::string& path, const json& body) {
    Reply r =
        Call(*address, method, path, body.is_null() ? "" : body.dump(), "application/json", admin);
    EXPECT_LT(r.code, 300) << method << " " << path << ": " << r.body;
    return r;
  };
  as_admin("POST", "/api/v1/namespaces", {{"metadata", {{"name", "team-a"}}}});
  as_admin("POST", "/api/v1/namespaces/team-a/serviceaccounts", {{"metadata", {{"name", "op"}}}});
  // A token for the ServiceAccount, through the TokenRequest API.
  Reply issued = as_admin("POST", "/api/v1/namespaces/team-a/serviceaccounts/op/token",
                          {{"apiVersion", "authentication.k8s.io/v1"},
                           {"kind", "TokenRequest"},
                           {"spec", {{"expirationSeconds", 600}}}});
  EXPECT_EQ(issued.Json()["kind"], "TokenRequest");
  const std::string token = issued.Json()["status"]["token"];
  ASSERT_FALSE(token.empty());
  const std::vector<std::pair<std::string, std::string>> op = {
      {"Authorization", "Bearer " + token}};
  auto as_op = [&](const std::string& method, const std::string& path, const std::string& body) {
    return Call(*address, method, path, body, "application/json", op);
  };
  // Nothing granted yet: 403 in the API server's words.
  Reply denied = as_op("GET", "/api/v1/namespaces/team-a/pods", "");
  EXPECT_EQ(denied.code, 403);
  EXPECT_EQ(denied.Json()["reason"], "Forbidden");
  EXPECT_EQ(denied.Json()["message"],
            "pods is forbidden: User \"system:serviceaccount:team-a:op\" cannot list resource "
            "\"pods\" in API group \"\" in the namespace \"team-a\"");
  // A Role and its binding grant list on pods in team-a, and get on one Lease by name.
  as_admin("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/team-a/roles",
           json::parse(R"({"metadata": {"name": "r"}, "rules": [
             {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
             {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
              "resourceNames": ["mine"], "verbs": ["get"]}]})"));
  as_admin("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/team-a/rolebindings",
           json::parse(R"({"metadata": {"name": "rb"},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"},
             "subjects": [{"kind": "ServiceAccount", "name": "op", "namespace": "team-a"}]})"));
  EXPECT_EQ(as_op("GET", "/api/v1/namespaces/team-a/pods", "").code, 200);
  EXPECT_EQ(as_op("GET", "/api/v1/pods", "").code, 403);                       // not cluster-wide
  EXPECT_EQ(as_op("GET", "/api/v1/namespaces/default/pods", "").code, 403);    // not elsewhere
  EXPECT_EQ(as_op("POST", "/api/v1/namespaces/team-a/pods", "{}").code, 403);  // not create
  EXPECT_EQ(as_op("GET", "/apis/coordination.k8s.io/v1/namespaces/team-a/leases/mine", "").code,
            404);  // allowed (and absent)
  Reply other = as_op("GET", "/apis/coordination.k8s.io/v1/namespaces/team-a/leases/other", "");
  EXPECT_EQ(other.code, 403);
  EXPECT_EQ(other.Json()["message"],
            "leases.coordination.k8s.io \"other\" is forbidden: User "
            "\"system:serviceaccount:team-a:op\" cannot get resource \"leases\" in API group "
            "\"coordination.k8s.io\" in the namespace \"team-a\"");
  // A ClusterRole bound cluster-wide: nodes.
  as_admin("POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles",
           json::parse(R"({"metadata": {"name": "nodes"}, "rules": [
             {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "watch"]}]})"));
  as_admin("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
           json::parse(R"({"metadata": {"name": "nodes"},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                         "name": "nodes"},
             "subjects": [{"kind": "ServiceAccount", "name": "op", "namespace": "team-a"}]})"));
  EXPECT_EQ(as_op("GET", "/api/v1/nodes", "").code, 200);
  EXPECT_EQ(as_op("GET", "/api/v1/nodes/n1", "").code, 403);  // list and watch, not get
  // Discovery is open to every authenticated user; no token, or a forged one, is 401.
  EXPECT_EQ(as_op("GET", "/api", "").code, 200);
  EXPECT_EQ(as_op("GET", "/apis/rbac.authorization.k8s.io/v1", "").code, 200);
  EXPECT_EQ(Call(*address, "GET", "/api/v1/namespaces").code, 401);
  EXPECT_EQ(
      Call(*address, "GET", "/api/v1/namespaces", "", "", {{"Authorization", "Bearer forged"}})
          .code,
      401);
  // The request log names each request's user.
  Reply log = Call(*address, "GET", "/emulator/v1/requests");
  bool seen = false;
  for (const json& r : log.Json()) {
    if (r["user"] == "system:serviceaccount:team-a:op" && r["code"] == 403) seen = true;
  }
  EXPECT_TRUE(seen) << log.body.substr(0, 2000);
  // A deleted ServiceAccount's token no longer authenticates.
  as_admin("DELETE", "/api/v1/namespaces/team-a/serviceaccounts/op", nullptr);
  EXPECT_EQ(as_op("GET", "/api/v1/namespaces/team-a/pods", "").code, 401);
}

TEST(EmulatorTlsTest, ServesHttpsWithTheGivenCertificate) {
  TempDir dir;
  std::string cmd =
      "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=127.0.0.1 "
      "-addext subjectAltName=IP:127.0.0.1 -keyout " +
      dir.File("key.pem") + " -out " + dir.File("cert.pem") + " >/dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0) GTEST_SKIP() << "no openssl command to make a certificate";
  Process process(
      {BinPath("antdt-kube-emulator"), "--listen", "127.0.0.1:0", "--ready-file", dir.File("ready"),
       "--tls-cert", dir.File("cert.pem"), "--tls-key", dir.File("key.pem")},
      dir.File("emulator.log"));
  auto address = WaitForReadyFile(dir.File("ready"), 30s);
  ASSERT_TRUE(address.has_value());
  net::io_context ioc;
  net::ssl::context ctx(net::ssl::context::tls_client);
  ctx.load_verify_file(dir.File("cert.pem"));
  ctx.set_verify_mode(net::ssl::verify_peer);
  tcp::socket socket = Connect(ioc, *address);
  net::ssl::stream<tcp::socket&> stream(socket, ctx);
  stream.handshake(net::ssl::stream_base::client);
  http::request<http::empty_body> req{http::verb::get, "/api/v1/namespaces/default", 11};
  req.set(http::field::host, *address);
  http::write(stream, req);
  beast::flat_buffer buffer;
  http::response<http::string_body> res;
  http::read(stream, buffer, res);
  EXPECT_EQ(res.result_int(), 200u);
  EXPECT_EQ(json::parse(res.body())["metadata"]["name"], "default");
}

}  // namespace
}  // namespace antdt::kubeemu
