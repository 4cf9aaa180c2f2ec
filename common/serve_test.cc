#include "common/serve.h"

#include <grpcpp/generic/generic_stub.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <future>
#include <sstream>

#include "common/process.h"
#include "prometheus/counter.h"

namespace antdt {
namespace {

// grpc.health.v1.Health/Check with an empty request (the whole server), as a
// client with its own stubs would call it; the serialized status.
std::optional<std::string> HealthCheck(const std::string& address) {
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::CompletionQueue cq;
  grpc::ByteBuffer request, response;
  grpc::Slice empty("");
  request = grpc::ByteBuffer(&empty, 1);
  auto call = stub.PrepareUnaryCall(&ctx, "/grpc.health.v1.Health/Check", request, &cq);
  call->StartCall();
  grpc::Status status;
  call->Finish(&response, &status, reinterpret_cast<void*>(1));
  void* tag = nullptr;
  bool ok = false;
  if (!cq.Next(&tag, &ok) || !ok || !status.ok()) return std::nullopt;
  std::vector<grpc::Slice> slices;
  if (!response.Dump(&slices).ok()) return std::nullopt;
  std::string out;
  for (const grpc::Slice& s : slices)
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(Serving, ServesHealthMetricsAndTheReadyFile) {
  auto serving = Serving::Start({"127.0.0.1:0", "", "127.0.0.1:0", nullptr, {}});
  ASSERT_TRUE(serving.ok()) << serving.status();
  const std::string address = (*serving)->address();
  ASSERT_EQ(address.rfind("127.0.0.1:", 0), 0u);
  EXPECT_NE(address, "127.0.0.1:0");
  // SERVING (field 1 = 1).
  EXPECT_EQ(HealthCheck(address), std::string("\x08\x01", 2));
  ASSERT_FALSE((*serving)->metrics_address().empty());
  EXPECT_TRUE(HttpGet((*serving)->metrics_address(), "/metrics").has_value());
  EXPECT_TRUE(HttpGet((*serving)->metrics_address(), "/healthz").has_value());

  const std::string ready = ::testing::TempDir() + "/serve_test.ready";
  ASSERT_TRUE((*serving)->WriteReady(ready, {{"socket", "unix:/run/x.sock"}}).ok());
  EXPECT_EQ(Read(ready),
            address + "\nmetrics=" + (*serving)->metrics_address() + "\nsocket=unix:/run/x.sock\n");
  EXPECT_TRUE((*serving)->WriteReady("").ok());  // no ready file asked for

  (*serving)->Shutdown(std::chrono::milliseconds(100));
  EXPECT_FALSE(HealthCheck(address).has_value());
  (*serving)->Shutdown(std::chrono::milliseconds(100));  // idempotent
}

// What came back on `fd` until the server closed it; nullopt when it had not
// closed it after 10 s.
std::optional<std::string> ReadUntilClosed(int fd) {
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n > 0) {
      out.append(buf, static_cast<size_t>(n));
    } else if (n == 0 || errno == ECONNRESET) {
      return out;
    } else {
      return std::nullopt;  // timed out: still open
    }
  }
}

// A load of idle and slow clients: hundreds of connections that send
// nothing, half a request, or a header too big, while a probe and a scrape
// come in. The probe and the scrape are answered (CivetWeb took 24 s with 100
// idle connections); the slow ones are dropped after the request timeout.
TEST(Serving, HundredsOfIdleAndSlowConnectionsDoNotBlockMetricsOrHealth) {
  auto serving = Serving::Start({"127.0.0.1:0", "", "127.0.0.1:0", nullptr, {}});
  ASSERT_TRUE(serving.ok()) << serving.status();
  const std::string metrics = (*serving)->metrics_address();
  std::vector<int> idle;
  for (int i = 0; i < 300; ++i) idle.push_back(ConnectAndSend(metrics, ""));
  for (int i = 0; i < 100; ++i)
    idle.push_back(ConnectAndSend(metrics, "GET /metrics HTTP/1.1\r\nHo"));
  for (int fd : idle) ASSERT_GE(fd, 0);
  // 10 s leaves room for a loaded machine; the figures are in
  // antdt-bench-hostile (docs/benchmarks.md).
  for (const char* path : {"/healthz", "/metrics", "/healthz?probe=1"}) {
    auto got = std::async(std::launch::async, [&] { return HttpGet(metrics, path); });
    ASSERT_EQ(got.wait_for(std::chrono::seconds(10)), std::future_status::ready) << path;
    EXPECT_TRUE(got.get().has_value()) << path;
  }
  // A half-sent request is dropped (the server closes), not kept forever.
  EXPECT_EQ(ReadUntilClosed(idle.back()), std::string());
  for (int fd : idle) close(fd);

  // A header over 8 KiB is refused and the connection closed.
  const int big = ConnectAndSend(metrics, "GET /metrics HTTP/1.1\r\nX: " + std::string(20000, 'a'));
  ASSERT_GE(big, 0);
  const std::optional<std::string> answer = ReadUntilClosed(big);
  ASSERT_TRUE(answer.has_value()) << "not closed";
  EXPECT_EQ(answer->find("200 OK"), std::string::npos) << *answer;
  close(big);
}

// What a scraper or a probe sees: the text format at /metrics, 404 elsewhere,
// HEAD answered without a body, other methods refused, keep-alive honoured.
TEST(Serving, TheMetricsEndpointSpeaksPlainHttp) {
  auto registry = std::make_shared<prometheus::Registry>();
  prometheus::BuildCounter()
      .Name("antdt_test_total")
      .Help("t")
      .Register(*registry)
      .Add({})
      .Increment();
  auto serving = Serving::Start({"127.0.0.1:0", "", "127.0.0.1:0", registry, {}});
  ASSERT_TRUE(serving.ok()) << serving.status();
  const std::string metrics = (*serving)->metrics_address();
  auto body = HttpGet(metrics, "/metrics");
  ASSERT_TRUE(body.has_value());
  EXPECT_NE(body->find("antdt_test_total 1"), std::string::npos) << *body;
  EXPECT_FALSE(HttpGet(metrics, "/nowhere").has_value());

  auto exchange = [&](const std::string& request) {
    const int fd = ConnectAndSend(metrics, request);
    std::optional<std::string> out = ReadUntilClosed(fd);
    close(fd);
    return out.value_or("(not closed)");
  };
  const std::string missing = exchange("GET /nowhere HTTP/1.0\r\n\r\n");
  EXPECT_EQ(missing.rfind("HTTP/1.1 404", 0), 0u) << missing;
  const std::string head = exchange("HEAD /metrics HTTP/1.0\r\n\r\n");
  EXPECT_EQ(head.rfind("HTTP/1.1 200", 0), 0u) << head;
  EXPECT_EQ(head.find("antdt_test_total"), std::string::npos) << head;
  const std::string post = exchange("POST /metrics HTTP/1.0\r\nContent-Length: 0\r\n\r\n");
  EXPECT_EQ(post.rfind("HTTP/1.1 405", 0), 0u) << post;
  // Two requests on one kept-alive connection, then the server's timeout.
  const std::string two =
      exchange("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(two.find("HTTP/1.1 200"), 0u) << two;
  EXPECT_NE(two.find("antdt_test_total 1"), std::string::npos) << two;
}

TEST(Serving, NoMetricsEndpointUnlessAsked) {
  auto serving = Serving::Start({"127.0.0.1:0", "", "", nullptr, {}});
  ASSERT_TRUE(serving.ok()) << serving.status();
  EXPECT_TRUE((*serving)->metrics_address().empty());
  EXPECT_EQ((*serving)->exposer(), nullptr);
}

TEST(Serving, AnAddressThatCannotBeBoundNamesTheFlag) {
  auto taken = Serving::Start({"127.0.0.1:0", "", "", nullptr, {}});
  ASSERT_TRUE(taken.ok());
  auto serving = Serving::Start({"256.1.1.1:0", "", "", nullptr, {}});
  ASSERT_FALSE(serving.ok());
  EXPECT_EQ(serving.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(serving.status().message().find("listen: cannot listen on 256.1.1.1:0"),
            std::string::npos)
      << serving.status();
  auto metrics = Serving::Start({"127.0.0.1:0", "", (*taken)->address(), nullptr, {}});
  ASSERT_FALSE(metrics.ok());
  EXPECT_NE(metrics.status().message().find("metrics_listen"), std::string::npos)
      << metrics.status();
}

}  // namespace
}  // namespace antdt
