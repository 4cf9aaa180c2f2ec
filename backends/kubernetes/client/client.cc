#include "backends/kubernetes/client/client.h"

#include <cpprest/containerstream.h>
#include <cpprest/http_client.h>
#include <cpprest/uri_builder.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/config.h"
#include "common/log.h"
#include "common/status.h"

namespace antdt::kube {
namespace {

namespace http = web::http;
using http::client::http_client;
using http::client::http_client_config;
using SteadyClock = std::chrono::steady_clock;

constexpr auto kTokenRefreshPeriod = std::chrono::seconds(60);
// Added to a watch's timeoutSeconds for the client's inactivity timer, so
// that the server, not cpprestsdk, ends an idle watch.
constexpr int kWatchTimeoutSlackSeconds = 30;
// When the watch asks for no server timeout (the server picks up to an hour).
constexpr int kWatchNoTimeoutSeconds = 4000;

double SecondsSince(SteadyClock::time_point start) {
  return std::chrono::duration<double>(SteadyClock::now() - start).count();
}

// A reservation-style token bucket: each call takes a token, sleeping until
// it would have been refilled.
class TokenBucket {
 public:
  TokenBucket(double qps, int burst)
      : qps_(qps), burst_(std::max(1, burst)), tokens_(burst_), last_(SteadyClock::now()) {}

  void Wait() {
    if (qps_ <= 0) return;
    double wait_seconds = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      SteadyClock::time_point now = SteadyClock::now();
      tokens_ = std::min<double>(
          burst_, tokens_ + std::chrono::duration<double>(now - last_).count() * qps_);
      last_ = now;
      tokens_ -= 1;
      if (tokens_ >= 0) return;
      wait_seconds = -tokens_ / qps_;
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(wait_seconds));
  }

 private:
  const double qps_;
  const int burst_;
  std::mutex mu_;
  double tokens_;
  SteadyClock::time_point last_;
};

// A Cancel that cancels the cpprestsdk requests of the watches using it.
class WatchCancel : public Cancel {
 public:
  // Registers a watch's token source; false if already cancelled.
  bool Add(const pplx::cancellation_token_source& cts) {
    std::lock_guard<std::mutex> lock(mu_);
    if (cancelled()) return false;
    sources_.push_back(cts);
    return true;
  }
  void Remove(const pplx::cancellation_token_source& cts) {
    std::lock_guard<std::mutex> lock(mu_);
    sources_.erase(std::remove(sources_.begin(), sources_.end(), cts), sources_.end());
  }

 protected:
  void OnTrigger() override {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& cts : sources_) cts.cancel();
  }

 private:
  std::mutex mu_;
  std::vector<pplx::cancellation_token_source> sources_;
};

std::string Truncate(std::string text, size_t max) {
  if (text.size() > max) text = text.substr(0, max) + "...";
  return text;
}

// The error for a non-2xx response: the body's Status, or one made up.
absl::Status ErrorFromResponse(int code, const std::string& body, int retry_after_header) {
  Json status = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (status.is_discarded() || !status.is_object() || status.value("kind", "") != "Status") {
    std::string message(absl::StripAsciiWhitespace(body));
    status = Json{{"kind", "Status"},
                  {"apiVersion", "v1"},
                  {"metadata", Json::object()},
                  {"status", "Failure"},
                  {"code", code}};
    if (!message.empty()) status["message"] = Truncate(message, 512);
  }
  if (retry_after_header > 0) {
    if (!status.contains("details") || !status["details"].is_object()) {
      status["details"] = Json::object();
    }
    if (!status["details"].contains("retryAfterSeconds")) {
      status["details"]["retryAfterSeconds"] = retry_after_header;
    }
  }
  return ApiError(code, status);
}

std::string AddQuery(const std::string& path,
                     const std::vector<std::pair<std::string, std::string>>& query) {
  web::uri_builder builder(path);
  for (const auto& [key, value] : query) builder.append_query(key, value, /*do_encoding=*/true);
  return builder.to_string();
}

}  // namespace

class Client::Impl {
 public:
  Impl(ClusterConfig config, ClientOptions options, std::string ca_pem)
      : config_(std::move(config)),
        options_(std::move(options)),
        ca_pem_(std::move(ca_pem)),
        bucket_(options_.qps, options_.burst),
        token_(config_.token) {}

  const ClusterConfig& config() const { return config_; }

  http_client_config MakeConfig(int timeout_seconds) const {
    http_client_config cfg;
    cfg.set_timeout(std::chrono::seconds(timeout_seconds));
    if (config_.insecure_skip_tls_verify) cfg.set_validate_certificates(false);
    if (!ca_pem_.empty() || !config_.client_cert_data.empty()) {
      cfg.set_ssl_context_callback([ca = ca_pem_, cert = config_.client_cert_data,
                                    key = config_.client_key_data](boost::asio::ssl::context& ctx) {
        // Create() checked that these load; error codes rather than throws
        // here, inside cpprestsdk's connection setup.
        boost::system::error_code ec;
        if (!ca.empty()) ctx.add_certificate_authority(boost::asio::buffer(ca), ec);
        if (!cert.empty()) {
          ctx.use_certificate_chain(boost::asio::buffer(cert), ec);
          ctx.use_private_key(boost::asio::buffer(key), boost::asio::ssl::context::pem, ec);
        }
      });
    }
    return cfg;
  }

  // The bearer token: re-read from token_file at most every minute, or now
  // when `force` (after a 401).
  std::string Token(bool force) {
    std::lock_guard<std::mutex> lock(token_mu_);
    if (config_.token_file.empty()) return token_;
    SteadyClock::time_point now = SteadyClock::now();
    if (force || !token_read_ || now - token_read_at_ >= kTokenRefreshPeriod) {
      token_read_ = true;
      token_read_at_ = now;
      absl::StatusOr<std::string> text = antdt::ReadFile(config_.token_file);
      if (text.ok()) token_ = std::string(absl::StripAsciiWhitespace(*text));
    }
    return token_;
  }

  std::shared_ptr<http_client> SharedClient() {
    std::lock_guard<std::mutex> lock(client_mu_);
    if (!client_) {
      client_ = std::make_shared<http_client>(web::uri(config_.server),
                                              MakeConfig(options_.request_timeout_seconds));
    }
    return client_;
  }

  // After a transport error: the next request gets a fresh client (a failed
  // cpprestsdk connection pool may keep failing, cpprestsdk issue #660).
  void DropClient(const std::shared_ptr<http_client>& failed) {
    std::lock_guard<std::mutex> lock(client_mu_);
    if (client_ == failed) client_.reset();
  }

  http::http_request MakeRequest(const http::method& method, const std::string& path_query,
                                 bool force_token) {
    http::http_request request(method);
    request.set_request_uri(web::uri(path_query));
    request.headers().add("Accept", "application/json");
    request.headers().add("User-Agent", options_.user_agent);
    std::string token = Token(force_token);
    if (!token.empty()) request.headers().add("Authorization", "Bearer " + token);
    return request;
  }

  void Report(const std::string& verb, const std::string& resource, int code, double seconds) {
    if (options_.on_request) options_.on_request(verb, resource, code, seconds);
    if (code == 403) ReportForbidden(verb, resource);
  }

  // A 403 means the credentials lack a permission: said once per verb and
  // resource, naming them and where a Helm install grants them (each request
  // is also counted by its code through on_request).
  void ReportForbidden(const std::string& verb, const std::string& resource) {
    {
      std::lock_guard<std::mutex> lock(forbidden_mu_);
      if (!forbidden_.insert(verb + " " + resource).second) return;
    }
    LogEvent(
        "api_forbidden",
        {{"verb", verb},
         {"resource", resource},
         {"server", config_.server},
         {"fix",
          "grant it to the operator's ServiceAccount (the Helm chart's templates/rbac.yaml)"}});
  }

  struct Response {
    int code = 0;
    std::string body;
    int retry_after = 0;  // the Retry-After header, seconds; 0 when absent
  };

  // One request: rate limited, retried once after a 401 when the token comes
  // from a file, and after 429s up to max_retries_429 times. Transport
  // errors are Unavailable; HTTP errors come back as responses.
  absl::StatusOr<Response> Send(const std::string& verb, const std::string& resource,
                                const http::method& method, const std::string& path_query,
                                const std::optional<std::string>& body,
                                const std::string& content_type) {
    bool retried_401 = false;
    int retries_429 = 0;
    for (;;) {
      bucket_.Wait();
      http::http_request request = MakeRequest(method, path_query, retried_401);
      if (body.has_value()) request.set_body(*body, content_type);
      std::shared_ptr<http_client> client = SharedClient();
      SteadyClock::time_point start = SteadyClock::now();
      Response response;
      try {
        http::http_response raw = client->request(request).get();
        response.code = raw.status_code();
        response.body = raw.extract_utf8string(/*ignore_content_type=*/true).get();
        auto it = raw.headers().find("Retry-After");
        if (it != raw.headers().end()) {
          int seconds = 0;
          if (absl::SimpleAtoi(it->second, &seconds) && seconds > 0) response.retry_after = seconds;
        }
      } catch (const std::exception& e) {
        Report(verb, resource, 0, SecondsSince(start));
        DropClient(client);
        return absl::UnavailableError(
            absl::StrCat(method, " ", config_.server, path_query, ": ", e.what()));
      }
      Report(verb, resource, response.code, SecondsSince(start));
      if (response.code == 401 && !retried_401 && !config_.token_file.empty()) {
        retried_401 = true;
        continue;
      }
      if (response.code == 429 && retries_429 < options_.max_retries_429) {
        ++retries_429;
        int seconds = response.retry_after;
        if (seconds <= 0) {
          seconds = RetryAfterSeconds(ErrorFromResponse(429, response.body, 0));
        }
        if (seconds <= 0) seconds = 1;
        std::this_thread::sleep_for(std::chrono::seconds(std::min(seconds, 600)));
        continue;
      }
      return response;
    }
  }

  // Send + the JSON of a 2xx response, or the error.
  absl::StatusOr<Json> SendJson(const std::string& verb, const std::string& resource,
                                const http::method& method, const std::string& path_query,
                                const std::optional<std::string>& body = std::nullopt,
                                const std::string& content_type = "application/json") {
    ASSIGN_OR_RETURN(Response response,
                     Send(verb, resource, method, path_query, body, content_type));
    if (response.code < 200 || response.code >= 300) {
      return ErrorFromResponse(response.code, response.body, response.retry_after);
    }
    if (response.body.empty()) return Json::object();
    Json parsed = Json::parse(response.body, nullptr, /*allow_exceptions=*/false);
    if (parsed.is_discarded()) {
      return absl::InternalError(absl::StrCat(
          method, " ", path_query, ": response is not JSON: ", Truncate(response.body, 200)));
    }
    return parsed;
  }

  absl::Status Watch(const ResourceRef& r, const std::string& ns, const WatchOptions& options,
                     const std::function<bool(const WatchEvent&)>& on_event, Cancel* cancel);

 private:
  const ClusterConfig config_;
  const ClientOptions options_;
  const std::string ca_pem_;
  TokenBucket bucket_;

  std::mutex token_mu_;
  std::string token_;
  bool token_read_ = false;
  SteadyClock::time_point token_read_at_;

  std::mutex client_mu_;
  std::shared_ptr<http_client> client_;

  std::mutex forbidden_mu_;
  std::set<std::string> forbidden_;  // "verb resource" already reported
};

namespace {

// Registers a watch's cancellation source with the caller's Cancel for the
// duration of the watch.
class CancelScope {
 public:
  CancelScope(Cancel* cancel, const pplx::cancellation_token_source& cts)
      : cancel_(dynamic_cast<WatchCancel*>(cancel)), cts_(cts) {
    if (cancel_ != nullptr && !cancel_->Add(cts_)) cts_.cancel();
  }
  ~CancelScope() {
    if (cancel_ != nullptr) cancel_->Remove(cts_);
  }
  CancelScope(const CancelScope&) = delete;
  CancelScope& operator=(const CancelScope&) = delete;

 private:
  WatchCancel* cancel_;
  pplx::cancellation_token_source cts_;
};

}  // namespace

absl::Status Client::Impl::Watch(const ResourceRef& r, const std::string& ns,
                                 const WatchOptions& options,
                                 const std::function<bool(const WatchEvent&)>& on_event,
                                 Cancel* cancel) {
  std::vector<std::pair<std::string, std::string>> query = {{"watch", "1"}};
  if (!options.resource_version.empty()) {
    query.emplace_back("resourceVersion", options.resource_version);
  }
  if (options.allow_bookmarks) query.emplace_back("allowWatchBookmarks", "true");
  if (!options.label_selector.empty()) query.emplace_back("labelSelector", options.label_selector);
  if (!options.field_selector.empty()) query.emplace_back("fieldSelector", options.field_selector);
  int client_timeout = kWatchNoTimeoutSeconds;
  if (options.timeout_seconds > 0) {
    query.emplace_back("timeoutSeconds", std::to_string(options.timeout_seconds));
    client_timeout = static_cast<int>(options.timeout_seconds) + kWatchTimeoutSlackSeconds;
  }
  const std::string path_query = AddQuery(r.CollectionPath(ns), query);

  pplx::cancellation_token_source cts;
  CancelScope scope(cancel, cts);
  auto cancelled = [&] { return cts.get_token().is_canceled() || (cancel && cancel->cancelled()); };

  bool retried_401 = false;
  for (;;) {
    if (cancelled()) return absl::CancelledError("watch cancelled");
    bucket_.Wait();
    // A new client per watch: its inactivity timer is the watch's timeout
    // plus slack, and a broken stream cannot poison other requests.
    http_client client(web::uri(config_.server), MakeConfig(client_timeout));
    http::http_request request = MakeRequest(http::methods::GET, path_query, retried_401);
    SteadyClock::time_point start = SteadyClock::now();
    http::http_response response;
    // Whatever way this attempt ends, cancelling closes its connection before
    // `response` and `client` go (cpprestsdk reads ahead, and an idle watch
    // would otherwise hold its socket until the inactivity timer fires).
    struct Closer {
      pplx::cancellation_token_source& cts;
      bool armed = true;
      ~Closer() {
        if (armed) cts.cancel();
      }
    } closer{cts};
    try {
      response = client.request(request, cts.get_token()).get();
    } catch (const std::exception& e) {
      Report("watch", r.plural, 0, SecondsSince(start));
      if (cancelled()) return absl::CancelledError("watch cancelled");
      return absl::UnavailableError(
          absl::StrCat("watch ", config_.server, path_query, ": ", e.what()));
    }
    Report("watch", r.plural, response.status_code(), SecondsSince(start));
    if (response.status_code() != http::status_codes::OK) {
      std::string body;
      try {
        body = response.extract_utf8string(/*ignore_content_type=*/true).get();
      } catch (const std::exception&) {
        if (cancelled()) return absl::CancelledError("watch cancelled");
      }
      if (response.status_code() == 401 && !retried_401 && !config_.token_file.empty()) {
        retried_401 = true;
        closer.armed = false;  // the body was read whole; the retry reuses `cts`
        continue;
      }
      int retry_after = 0;
      auto it = response.headers().find("Retry-After");
      if (it != response.headers().end()) (void)absl::SimpleAtoi(it->second, &retry_after);
      return ErrorFromResponse(response.status_code(), body, retry_after);
    }

    concurrency::streams::istream stream = response.body();
    for (;;) {
      concurrency::streams::container_buffer<std::string> buffer;
      try {
        stream.read_line(buffer).get();
      } catch (const std::exception& e) {
        if (cancelled()) return absl::CancelledError("watch cancelled");
        return absl::UnavailableError(
            absl::StrCat("watch ", config_.server, path_query, ": reading the stream: ", e.what()));
      }
      const std::string& line = buffer.collection();
      if (absl::StripAsciiWhitespace(line).empty()) {
        if (stream.is_eof()) return absl::OkStatus();
        continue;
      }
      Json parsed = Json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (parsed.is_discarded() || !parsed.is_object() || !parsed.contains("type") ||
          !parsed["type"].is_string()) {
        return absl::InternalError(
            absl::StrCat("watch ", path_query, ": malformed event: ", Truncate(line, 200)));
      }
      WatchEvent event;
      event.type = parsed["type"].get<std::string>();
      if (parsed.contains("object")) event.object = std::move(parsed["object"]);
      if (cancelled()) return absl::CancelledError("watch cancelled");
      if (!on_event(event)) return absl::OkStatus();
    }
  }
}

namespace {

// The namespace part of a path for `r`: empty for cluster-scoped kinds; for
// namespaced kinds `ns`, or the object's own when `ns` is empty.
absl::StatusOr<std::string> NamespaceFor(const ResourceRef& r, const std::string& ns,
                                         const Json* object) {
  if (!r.namespaced) return std::string();
  if (!ns.empty()) return ns;
  if (object != nullptr && object->is_object() && object->contains("metadata")) {
    const Json& metadata = (*object)["metadata"];
    if (metadata.is_object() && metadata.contains("namespace") &&
        metadata["namespace"].is_string() && !metadata["namespace"].get<std::string>().empty()) {
      return metadata["namespace"].get<std::string>();
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat(r.plural, " are namespaced: a namespace is needed"));
}

absl::StatusOr<std::string> NameOf(const Json& object) {
  if (object.is_object() && object.contains("metadata") && object["metadata"].is_object()) {
    const Json& metadata = object["metadata"];
    if (metadata.contains("name") && metadata["name"].is_string() &&
        !metadata["name"].get<std::string>().empty()) {
      return metadata["name"].get<std::string>();
    }
  }
  return absl::InvalidArgumentError("the object has no metadata.name");
}

}  // namespace

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Client::~Client() = default;

absl::StatusOr<std::unique_ptr<Client>> Client::Create(const ClusterConfig& config,
                                                       const ClientOptions& options) {
  if (config.server.empty()) return absl::InvalidArgumentError("kube client: no server");
  try {
    web::uri uri(config.server);
    if ((uri.scheme() != "http" && uri.scheme() != "https") || uri.host().empty()) {
      return absl::InvalidArgumentError("kube client: server " + config.server +
                                        ": must be http(s)://host[:port]");
    }
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError("kube client: server " + config.server + ": " + e.what());
  }
  std::string ca_pem;
  if (!config.ca_file.empty()) {
    absl::StatusOr<std::string> ca = antdt::ReadFile(config.ca_file);
    if (!ca.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("kube client: CA file ", config.ca_file, ": ", ca.status().message()));
    }
    ca_pem = *ca;
  }
  if (!config.ca_data.empty()) ca_pem += "\n" + config.ca_data;
  if (config.client_cert_data.empty() != config.client_key_data.empty()) {
    return absl::InvalidArgumentError(
        "kube client: a client certificate and key must be given together");
  }
  // Load the PEM material once here so that mistakes surface now, not as
  // failed TLS handshakes.
  try {
    boost::asio::ssl::context ctx(boost::asio::ssl::context::tls_client);
    if (!ca_pem.empty()) ctx.add_certificate_authority(boost::asio::buffer(ca_pem));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(std::string("kube client: CA certificates: ") + e.what());
  }
  try {
    boost::asio::ssl::context ctx(boost::asio::ssl::context::tls_client);
    if (!config.client_cert_data.empty()) {
      ctx.use_certificate_chain(boost::asio::buffer(config.client_cert_data));
      ctx.use_private_key(boost::asio::buffer(config.client_key_data),
                          boost::asio::ssl::context::pem);
    }
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(std::string("kube client: client certificate/key: ") +
                                      e.what());
  }
  return std::unique_ptr<Client>(
      new Client(std::make_unique<Impl>(config, options, std::move(ca_pem))));
}

const std::string& Client::default_namespace() const { return impl_->config().namespace_; }

absl::StatusOr<Json> Client::Get(const ResourceRef& r, const std::string& ns,
                                 const std::string& name) {
  ASSIGN_OR_RETURN(std::string path_ns, NamespaceFor(r, ns, nullptr));
  return impl_->SendJson("get", r.plural, http::methods::GET, r.ObjectPath(path_ns, name));
}

absl::StatusOr<Json> Client::List(const ResourceRef& r, const std::string& ns,
                                  const ListOptions& options) {
  std::string path_ns = r.namespaced ? ns : "";
  Json result;
  Json items = Json::array();
  std::string continue_token;
  bool paged = options.limit > 0;
  for (;;) {
    std::vector<std::pair<std::string, std::string>> query;
    if (!options.label_selector.empty())
      query.emplace_back("labelSelector", options.label_selector);
    if (!options.field_selector.empty())
      query.emplace_back("fieldSelector", options.field_selector);
    if (paged) query.emplace_back("limit", std::to_string(options.limit));
    if (!continue_token.empty()) {
      query.emplace_back("continue", continue_token);
    } else if (!options.resource_version.empty()) {
      query.emplace_back("resourceVersion", options.resource_version);
      if (!options.resource_version_match.empty()) {
        query.emplace_back("resourceVersionMatch", options.resource_version_match);
      }
    }
    absl::StatusOr<Json> page = impl_->SendJson("list", r.plural, http::methods::GET,
                                                AddQuery(r.CollectionPath(path_ns), query));
    if (!page.ok()) {
      if (IsExpired(page.status()) && !continue_token.empty()) {
        // The continue token expired mid-list: start over with one full list
        // (client-go's pager does the same).
        paged = false;
        continue_token.clear();
        result = Json();
        items = Json::array();
        continue;
      }
      return page.status();
    }
    if (!page->is_object()) return absl::InternalError("list " + r.plural + ": not an object");
    if (page->contains("items") && (*page)["items"].is_array()) {
      for (Json& item : (*page)["items"]) items.push_back(std::move(item));
    }
    std::string next;
    if (page->contains("metadata") && (*page)["metadata"].is_object()) {
      next = (*page)["metadata"].value("continue", "");
    }
    if (result.is_null()) result = std::move(*page);
    if (next.empty()) break;
    continue_token = next;
  }
  result["items"] = std::move(items);
  if (result.contains("metadata") && result["metadata"].is_object()) {
    result["metadata"].erase("continue");
    result["metadata"].erase("remainingItemCount");
  }
  return result;
}

absl::StatusOr<Json> Client::Create(const ResourceRef& r, const std::string& ns,
                                    const Json& object) {
  ASSIGN_OR_RETURN(std::string path_ns, NamespaceFor(r, ns, &object));
  return impl_->SendJson("create", r.plural, http::methods::POST, r.CollectionPath(path_ns),
                         object.dump());
}

absl::StatusOr<Json> Client::Update(const ResourceRef& r, const std::string& ns,
                                    const Json& object) {
  ASSIGN_OR_RETURN(std::string path_ns, NamespaceFor(r, ns, &object));
  ASSIGN_OR_RETURN(std::string name, NameOf(object));
  return impl_->SendJson("update", r.plural, http::methods::PUT, r.ObjectPath(path_ns, name),
                         object.dump());
}

absl::StatusOr<Json> Client::UpdateStatus(const ResourceRef& r, const std::string& ns,
                                          const Json& object) {
  ASSIGN_OR_RETURN(std::string path_ns, NamespaceFor(r, ns, &object));
  ASSIGN_OR_RETURN(std::string name, NameOf(object));
  return impl_->SendJson("update", r.plural, http::methods::PUT,
                         r.ObjectPath(path_ns, name, "status"), object.dump());
}

absl::StatusOr<Json> Client::Patch(const ResourceRef& r, const std::string& ns,
                                   const std::string& name, const Json& patch, PatchType type,
                                   const std::string& subresource) {
  ASSIGN_OR_RETURN(std::string path_ns, NamespaceFor(r, ns, nullptr));
  const char* content_type =
      type == PatchType::kMerge ? "application/merge-patch+json" : "application/json-patch+json";
  return impl_->SendJson("patch", r.plural, http::methods::PATCH,
                         r.ObjectPath(path_ns, name, subresource), patch.dump(), content_type);
}

absl::Status Client::Delete(const ResourceRef& r, const std::string& ns, const std::string& name,
                            const DeleteOptions& options) {
  ASSIGN_OR_RETURN(std::string path_ns, NamespaceFor(r, ns, nullptr));
  std::optional<std::string> body;
  Json delete_options = {{"kind", "DeleteOptions"}, {"apiVersion", "v1"}};
  bool any = false;
  if (!options.propagation_policy.empty()) {
    delete_options["propagationPolicy"] = options.propagation_policy;
    any = true;
  }
  if (!options.precondition_uid.empty()) {
    delete_options["preconditions"]["uid"] = options.precondition_uid;
    any = true;
  }
  if (!options.precondition_resource_version.empty()) {
    delete_options["preconditions"]["resourceVersion"] = options.precondition_resource_version;
    any = true;
  }
  if (options.grace_period_seconds.has_value()) {
    delete_options["gracePeriodSeconds"] = *options.grace_period_seconds;
    any = true;
  }
  if (any) body = delete_options.dump();
  return impl_->SendJson("delete", r.plural, http::methods::DEL, r.ObjectPath(path_ns, name), body)
      .status();
}

absl::Status Client::Watch(const ResourceRef& r, const std::string& ns, const WatchOptions& options,
                           const std::function<bool(const WatchEvent&)>& on_event, Cancel* cancel) {
  return impl_->Watch(r, r.namespaced ? ns : "", options, on_event, cancel);
}

std::unique_ptr<Cancel> Client::NewCancel() { return std::make_unique<WatchCancel>(); }

}  // namespace antdt::kube
