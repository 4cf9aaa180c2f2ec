// The demo trainer's pure parts: the synthetic data, the gradient, and the
// parameter server's step aggregation (threads, no gRPC).
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "common/testing/testing.h"
#include "workload/trainer/model.h"
#include "workload/trainer/ps.h"
#include "workload/trainer/ps_checkpoint.h"

namespace antdt::trainer {
namespace {

using std::chrono::milliseconds;

std::vector<Example> Examples(int64_t first, int64_t count, int64_t features) {
  std::vector<Example> out;
  for (int64_t id = first; id < first + count; ++id)
    out.push_back(SyntheticExample(id, features, 7));
  return out;
}

TEST(SyntheticExampleTest, DeterministicBoundedAndNoisy) {
  const Example a = SyntheticExample(42, 8, 7);
  const Example b = SyntheticExample(42, 8, 7);
  EXPECT_EQ(a.x, b.x);
  EXPECT_EQ(a.y, b.y);
  EXPECT_NE(SyntheticExample(43, 8, 7).x, a.x);
  EXPECT_NE(SyntheticExample(42, 8, 8).x, a.x);
  int positives = 0;
  const int n = 20'000;
  for (const Example& e : Examples(0, n, 8)) {
    for (float x : e.x) {
      ASSERT_GE(x, -1.0f);
      ASSERT_LE(x, 1.0f);
    }
    positives += e.y == 1.0f;
  }
  // No bias: about half the labels are positive.
  EXPECT_NEAR(static_cast<double>(positives) / n, 0.5, 0.05);
}

TEST(GradientTest, MatchesNumericalDerivative) {
  const std::vector<Example> examples = Examples(0, 50, 6);
  const std::vector<float> params = {0.3f, -0.2f, 0.5f, 0.0f, -0.7f, 0.1f};
  const GradientSum g = Gradient(params, examples);
  ASSERT_EQ(g.gradient.size(), params.size());
  EXPECT_NEAR(Gradient(std::vector<float>(6, 0.0f), examples).loss, 50 * std::log(2.0), 1e-9);
  for (size_t j = 0; j < params.size(); ++j) {
    const float h = 1e-2f;
    std::vector<float> up = params, down = params;
    up[j] += h;
    down[j] -= h;
    const double numeric = (Gradient(up, examples).loss - Gradient(down, examples).loss) / (2 * h);
    EXPECT_NEAR(g.gradient[j], numeric, 1e-3 * std::max(1.0, std::abs(numeric))) << "feature " << j;
  }
}

TEST(EvaluateTest, APerfectModelHasAccuracyOneAndLogLossNearZero) {
  // Labels that params {40, -40} separate with a margin of at least 20.
  const std::vector<Example> examples = {
      {{1.0f, -1.0f}, 1}, {{-0.5f, 0.5f}, 0}, {{0.5f, 0.0f}, 1}, {{0.0f, 0.6f}, 0}};
  const Evaluation e = Evaluate({40.0f, -40.0f}, examples);
  EXPECT_EQ(e.records, 4);
  EXPECT_DOUBLE_EQ(e.accuracy, 1.0);
  EXPECT_GE(e.log_loss, 0.0);
  EXPECT_LT(e.log_loss, 1e-8);
  // The same model with its sign flipped is wrong on every example, confidently.
  const Evaluation wrong = Evaluate({-40.0f, 40.0f}, examples);
  EXPECT_DOUBLE_EQ(wrong.accuracy, 0.0);
  EXPECT_GT(wrong.log_loss, 20.0);
}

TEST(EvaluateTest, AnUntrainedModelHasLogLossLn2AndAccuracyAboutAHalf) {
  const std::vector<Example> held_out = HeldOutExamples(4'096, 16, 7);
  ASSERT_EQ(held_out.size(), 4'096u);
  int positives = 0;
  for (const Example& e : held_out) positives += e.y == 1.0f;
  const double positive_fraction = positives / 4'096.0;
  EXPECT_NEAR(positive_fraction, 0.5, 0.05);  // balanced
  const Evaluation e = Evaluate(std::vector<float>(16, 0.0f), held_out);
  EXPECT_NEAR(e.log_loss, std::log(2.0), 1e-9);
  // A zero margin predicts 1 for every example: right on the positives.
  EXPECT_DOUBLE_EQ(e.accuracy, positive_fraction);
}

TEST(HeldOutExamplesTest, SameGeneratorDisjointIds) {
  const std::vector<Example> held_out = HeldOutExamples(3, 8, 7);
  ASSERT_EQ(held_out.size(), 3u);
  for (int64_t i = 0; i < 3; ++i) {  // the generator's records after kHeldOutFirstId
    EXPECT_EQ(held_out[static_cast<size_t>(i)].x, SyntheticExample(kHeldOutFirstId + i, 8, 7).x);
  }
  EXPECT_NE(held_out[0].x, SyntheticExample(0, 8, 7).x);
  EXPECT_EQ(HeldOutExamples(3, 8, 7)[2].x, held_out[2].x);  // deterministic
  EXPECT_GT(kHeldOutFirstId, int64_t{1} << 40);             // far above any dataset's ids
}

TEST(PsSliceTest, ContiguousInOrder) {
  EXPECT_EQ(PsSlice(10, 0, 3).begin, 0);
  EXPECT_EQ(PsSlice(10, 0, 3).size, 4);
  EXPECT_EQ(PsSlice(10, 1, 3).begin, 4);
  EXPECT_EQ(PsSlice(10, 1, 3).size, 3);
  EXPECT_EQ(PsSlice(10, 2, 3).begin, 7);
  EXPECT_EQ(PsSlice(10, 2, 3).size, 3);
}

PsOptions Options(int workers, int backup, int64_t features = 1,
                  milliseconds timeout = milliseconds(30'000)) {
  PsOptions o;
  o.features = features;
  o.workers = workers;
  o.backup = backup;
  o.learning_rate = 1.0;
  o.step_timeout = timeout;
  return o;
}

// Pushes on its own thread; the result once the step completed.
class AsyncPush {
 public:
  // With a valid `gate`, the push waits for it: threads made beforehand push
  // together, however long making a thread takes (ThreadSanitizer).
  AsyncPush(ParameterShard& ps, std::string worker, int64_t step, int64_t samples, float grad,
            std::shared_future<void> gate = {})
      : thread_([&ps, worker, step, samples, grad, gate, this] {
          if (gate.valid()) gate.wait();
          auto r = ps.Push(worker, step, samples, {grad}, 0.5 * samples);
          ASSERT_TRUE(r.ok()) << r.status();
          result_ = *r;
        }) {}
  PushResult Get() {
    thread_.join();
    return result_;
  }

 private:
  PushResult result_;
  std::thread thread_;
};

TEST(ParameterShardTest, ValidatesOptions) {
  EXPECT_FALSE(ParameterShard::Validate(Options(3, 3)).ok());
  EXPECT_FALSE(ParameterShard::Validate(Options(0, 0)).ok());
  EXPECT_FALSE(ParameterShard::Validate(Options(2, 0, 0)).ok());
  EXPECT_TRUE(ParameterShard::Validate(Options(3, 2)).ok());
}

TEST(ParameterShardTest, WaitsForEveryWorker) {
  ParameterShard ps(Options(2, 0));
  AsyncPush first(ps, "w0", 0, 1, 1.0f);
  ASSERT_TRUE(antdt::testing::WaitFor([&] { return ps.Stats().pending == 1; }, milliseconds(5000)));
  EXPECT_EQ(ps.Stats().step, 0);  // still waiting for w1
  auto second = ps.Push("w1", 0, 1, {3.0f}, 0.5);
  ASSERT_TRUE(second.ok());
  const PushResult r = first.Get();
  EXPECT_EQ(r.step, 1);
  EXPECT_EQ(second->step, 1);
  EXPECT_EQ(r.contributions, 2);
  EXPECT_TRUE(r.accepted);
  EXPECT_FLOAT_EQ(r.parameters[0], -2.0f);  // (1 + 3) / 2 samples
  EXPECT_EQ(r.parameters, second->parameters);
  EXPECT_TRUE(second->completed);
  EXPECT_FALSE(r.completed);
}

TEST(ParameterShardTest, WeightsBySamples) {
  ParameterShard ps(Options(2, 0));
  AsyncPush first(ps, "w0", 0, 1, 1.0f);  // mean gradient 1 over 1 sample
  ASSERT_TRUE(antdt::testing::WaitFor([&] { return ps.Stats().pending == 1; }, milliseconds(5000)));
  auto second = ps.Push("w1", 0, 10, {30.0f}, 5.0);  // mean gradient 3 over 10
  ASSERT_TRUE(second.ok());
  first.Get();
  EXPECT_FLOAT_EQ(second->parameters[0], -31.0f / 11.0f);  // not -(1 + 3) / 2
  EXPECT_DOUBLE_EQ(second->mean_loss, 0.5);
  EXPECT_EQ(ps.Stats().samples, 11);
  EXPECT_DOUBLE_EQ(ps.Stats().first_mean_loss, 0.5);
}

TEST(ParameterShardTest, BackupDropsTheSlowest) {
  ParameterShard ps(Options(3, 1));
  AsyncPush first(ps, "w0", 0, 1, 1.0f);
  ASSERT_TRUE(antdt::testing::WaitFor([&] { return ps.Stats().pending == 1; }, milliseconds(5000)));
  auto second = ps.Push("w1", 0, 1, {3.0f}, 0.5);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(first.Get().step, 1);
  EXPECT_EQ(second->contributions, 2);
  EXPECT_FLOAT_EQ(second->parameters[0], -2.0f);
  // The slowest worker's gradient for the finished step is answered at once
  // with the current parameters and dropped.
  auto late = ps.Push("w2", 0, 1, {100.0f}, 0.5);
  ASSERT_TRUE(late.ok());
  EXPECT_FALSE(late->accepted);
  EXPECT_EQ(late->step, 1);
  EXPECT_FLOAT_EQ(late->parameters[0], -2.0f);
  EXPECT_EQ(ps.Stats().dropped, 1);
}

TEST(ParameterShardTest, StepTimeoutCompletesWithWhatItHas) {
  ParameterShard ps(Options(3, 0, 1, milliseconds(200)));
  const auto t0 = std::chrono::steady_clock::now();
  auto r = ps.Push("w0", 0, 2, {4.0f}, 1.0);  // w1 and w2 never come
  const auto waited = std::chrono::steady_clock::now() - t0;
  ASSERT_TRUE(r.ok());
  EXPECT_GE(waited, milliseconds(200));
  EXPECT_EQ(r->step, 1);
  EXPECT_EQ(r->contributions, 1);
  EXPECT_TRUE(r->accepted);
  EXPECT_TRUE(r->completed);
  EXPECT_FLOAT_EQ(r->parameters[0], -2.0f);
}

// The step deadline: once half the gradients a step needs are in, the step's
// start plus step_deadline x the time they took. Before it, and for any other
// step, DeadlinePassed says no; after it, yes, and the step still completes
// with every gradient (the late worker pushes what it trained).
TEST(ParameterShardTest, StepDeadlineFollowsTheFirstHalfOfTheGradients) {
  PsOptions o = Options(3, 0);
  for (double bad : {0.5, 1.0, 11.0}) {
    o.step_deadline = bad;
    EXPECT_FALSE(ParameterShard::Validate(o).ok()) << bad;
  }
  o.step_deadline = 10;
  ASSERT_TRUE(ParameterShard::Validate(o).ok());
  ParameterShard ps(o);
  const auto t0 = std::chrono::steady_clock::now();  // the step started before
  AsyncPush first(ps, "w0", 0, 4, 1.0f);
  ASSERT_TRUE(antdt::testing::WaitFor([&] { return ps.Stats().pending == 1; }, milliseconds(5000)));
  EXPECT_FALSE(ps.DeadlinePassed(0)) << "one gradient of three is not half";
  std::this_thread::sleep_for(milliseconds(50));
  const auto quorum_at = std::chrono::steady_clock::now();
  AsyncPush second(ps, "w1", 0, 4, 1.0f);
  ASSERT_TRUE(antdt::testing::WaitFor([&] { return ps.Stats().pending == 2; }, milliseconds(5000)));
  const auto earliest = t0 + (quorum_at - t0) * 10;
  if (std::chrono::steady_clock::now() < earliest) {
    EXPECT_FALSE(ps.DeadlinePassed(0));
  }
  EXPECT_FALSE(ps.DeadlinePassed(1)) << "not the step in progress";
  ASSERT_TRUE(antdt::testing::WaitFor([&] { return ps.DeadlinePassed(0); }, milliseconds(30'000)));
  EXPECT_GE(std::chrono::steady_clock::now(), earliest);
  EXPECT_TRUE(ps.DeadlinePassed(0)) << "and stays passed";
  auto late = ps.Push("w2", 0, 1, {1.0f}, 0.5);  // a quarter of its batch
  ASSERT_TRUE(late.ok());
  EXPECT_TRUE(late->accepted);
  EXPECT_EQ(late->contributions, 3);
  EXPECT_EQ(first.Get().step, 1);
  second.Get();
  EXPECT_EQ(ps.Stats().samples, 9);
  EXPECT_EQ(ps.Stats().deadlines_passed, 1);
  EXPECT_FALSE(ps.DeadlinePassed(1)) << "a new step has no deadline before half its gradients";
}

// The deadline fitted to the steps (--step-deadline-floor): the ceiling until
// a step of 16 workers was measured; then, with every gradient arriving
// together, the floor. A job of fewer workers keeps the ceiling.
TEST(ParameterShardTest, FittedDeadlineFallsToItsFloorWhenGradientsArriveTogether) {
  constexpr int kWorkers = DeadlineFit::kMinWorkers;
  PsOptions o = Options(kWorkers, 0);
  o.step_deadline = 1.25;
  for (double bad : {1.0, 1.3, -1.0}) {
    o.step_deadline_floor = bad;
    EXPECT_FALSE(ParameterShard::Validate(o).ok()) << bad;
  }
  o.step_deadline_floor = 1.1;
  ASSERT_TRUE(ParameterShard::Validate(o).ok());
  ParameterShard ps(o);
  EXPECT_DOUBLE_EQ(ps.Stats().deadline_factor, 1.25) << "nothing measured yet";
  for (int64_t step = 0; step < 3; ++step) {
    std::promise<void> trained;
    const std::shared_future<void> gate = trained.get_future().share();
    std::vector<std::unique_ptr<AsyncPush>> pushes;
    for (int w = 0; w < kWorkers; ++w) {
      pushes.push_back(
          std::make_unique<AsyncPush>(ps, "w" + std::to_string(w), step, 4, 1.0f, gate));
    }
    // Every worker trains as long: the arrivals' spread is the threads'
    // waking (a few milliseconds), well inside the floor's 3.3% of 500 ms.
    std::this_thread::sleep_for(milliseconds(500));
    trained.set_value();
    for (auto& p : pushes) p->Get();
    EXPECT_EQ(ps.Stats().step, step + 1);
  }
  EXPECT_DOUBLE_EQ(ps.Stats().deadline_factor, 1.1);
  o.step_deadline_floor = 0;  // fixed
  EXPECT_DOUBLE_EQ(ParameterShard(o).Stats().deadline_factor, 1.25);
}

TEST(ParameterShardTest, StepsStopWaitingForWorkersThatLeft) {
  ParameterShard ps(Options(3, 0, 1, std::chrono::milliseconds(60'000)));
  std::thread pusher([&] {
    auto r = ps.Push("w0", 0, 2, {4.0f}, 1.0);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->step, 1);
    EXPECT_EQ(r->contributions, 1);
  });
  EXPECT_EQ(ps.Leave("w1"), 2);
  EXPECT_EQ(ps.Leave("w2"), 1);  // w0's step completes now, not after the timeout
  pusher.join();
  EXPECT_EQ(ps.Stats().step, 1);
  // A push rejoins: with w1 back, a step waits for two again.
  std::thread second([&] { ASSERT_TRUE(ps.Push("w1", 1, 1, {1.0f}, 0.5).ok()); });
  while (ps.Stats().pending < 1) std::this_thread::yield();  // w1 is in, waiting
  auto r = ps.Push("w0", 1, 1, {1.0f}, 0.5);
  second.join();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->contributions, 2);
}

// Scaled from 3 workers to 1 and back to 3: a step waits for the members
// there are, the removed ones neither awaited nor counted as left, the added
// ones from their first push; a world size at or below the backup count is
// refused and changes nothing.
TEST(ParameterShardTest, ResizeChangesWhoAStepWaitsFor) {
  ParameterShard ps(Options(3, 1, 1, std::chrono::milliseconds(60'000)));
  EXPECT_FALSE(ps.Resize(1, {}, {}).ok());  // backup 1: at least 2
  EXPECT_EQ(ps.Stats().step, 0);
  const std::vector<std::string> two = {"w2"};
  ASSERT_EQ(*ps.Resize(2, two, {}), 1);  // w0 and w1, one of them a backup
  auto r = ps.Push("w0", 0, 2, {4.0f}, 1.0);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->completed);
  EXPECT_EQ(r->contributions, 1);

  // Back to 4: w2 and w3 are awaited only from their first push.
  const std::vector<std::string> added = {"w2", "w3"};
  ASSERT_EQ(*ps.Resize(4, {}, added), 1);
  std::thread joiner([&] { ASSERT_TRUE(ps.Push("w2", 1, 1, {1.0f}, 0.5).ok()); });
  while (ps.Stats().pending < 1) std::this_thread::yield();
  // w2 joined: a step needs 4 - 1 - 1 (w3 not yet) = 2; w0 completes it.
  r = ps.Push("w0", 1, 1, {1.0f}, 0.5);
  joiner.join();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->contributions, 2);
  EXPECT_EQ(ps.Stats().step, 2);
}

TEST(ParameterShardTest, StaleAndDuplicateGradientsAreDropped) {
  ParameterShard ps(Options(1, 0));
  ASSERT_TRUE(ps.Push("w0", 0, 1, {1.0f}, 0.5).ok());
  ASSERT_TRUE(ps.Push("w0", 1, 1, {1.0f}, 0.5).ok());
  auto stale = ps.Push("w0", 0, 1, {50.0f}, 0.5);
  ASSERT_TRUE(stale.ok());
  EXPECT_FALSE(stale->accepted);
  EXPECT_EQ(stale->step, 2);
  EXPECT_FLOAT_EQ(stale->parameters[0], -2.0f);
  EXPECT_EQ(ps.Stats().dropped, 1);
  EXPECT_EQ(ps.Pull().step, 2);
  EXPECT_FALSE(ps.Push("w0", 2, 1, {1.0f, 2.0f}, 0.5).ok());  // wrong slice size

  // A second push from the same worker in a step (a retry, or a restarted
  // worker) is not averaged twice: it waits for the step like the first.
  ParameterShard two(Options(2, 0));
  AsyncPush first(two, "w0", 0, 1, 1.0f);
  ASSERT_TRUE(
      antdt::testing::WaitFor([&] { return two.Stats().pending == 1; }, milliseconds(5000)));
  AsyncPush again(two, "w0", 0, 1, 1.0f);
  ASSERT_TRUE(
      antdt::testing::WaitFor([&] { return two.Stats().dropped == 1; }, milliseconds(5000)));
  EXPECT_EQ(two.Stats().step, 0);
  ASSERT_TRUE(two.Push("w1", 0, 1, {3.0f}, 0.5).ok());
  EXPECT_FALSE(again.Get().accepted);
  EXPECT_FLOAT_EQ(first.Get().parameters[0], -2.0f);
}

TEST(ParameterShardTest, ShutdownReleasesBlockedPushes) {
  ParameterShard ps(Options(2, 0));
  AsyncPush first(ps, "w0", 0, 1, 1.0f);
  ASSERT_TRUE(antdt::testing::WaitFor([&] { return ps.Stats().pending == 1; }, milliseconds(5000)));
  ps.Shutdown();
  EXPECT_EQ(first.Get().step, 0);
}

TEST(ParameterShardTest, CheckpointsHoldTheStateBeforeTheStepAndItsAnswersWait) {
  ParameterShard ps(Options(1, 0));
  std::mutex mu;
  std::vector<PsState> written;
  auto count = [&] {
    std::lock_guard<std::mutex> lock(mu);
    return written.size();
  };
  std::atomic<bool> release{false};
  ps.SetCheckpointHook(2, [&](const PsState& s) {
    {
      std::lock_guard<std::mutex> lock(mu);
      written.push_back(s);
    }
    while (!release.load()) std::this_thread::sleep_for(milliseconds(1));
  });
  ASSERT_TRUE(ps.Push("w0", 0, 1, {1.0f}, 0.5).ok());  // step 0: no checkpoint at 0
  ASSERT_TRUE(ps.Push("w0", 1, 1, {1.0f}, 0.5).ok());  // step 1
  EXPECT_EQ(count(), 0u);
  // Completing step 2 checkpoints the state after two steps; its answer waits
  // until the checkpoint is written.
  AsyncPush third(ps, "w0", 2, 1, 1.0f);
  ASSERT_TRUE(antdt::testing::WaitFor([&] { return count() == 1; }, milliseconds(5000)));
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_EQ(ps.Stats().step, 3);
  release = true;
  EXPECT_EQ(third.Get().step, 3);
  ASSERT_EQ(written.size(), 1u);
  EXPECT_EQ(written[0].step, 2);
  EXPECT_FLOAT_EQ(written[0].parameters[0], -2.0f);
  EXPECT_EQ(written[0].samples, 2);
  // On demand: the step named, besides every second one.
  EXPECT_EQ(ps.ScheduleCheckpoint(0), 4);  // not before the step in progress
  EXPECT_EQ(ps.ScheduleCheckpoint(5), 5);
  for (int64_t step = 3; step < 7; ++step) ASSERT_TRUE(ps.Push("w0", step, 1, {1.0f}, 0.5).ok());
  std::vector<int64_t> steps;
  for (const PsState& s : written) steps.push_back(s.step);
  EXPECT_EQ(steps, (std::vector<int64_t>{2, 4, 5, 6}));
}

TEST(ParameterShardTest, FreezeWaitsForTheStepBoundaryThenPushesAreSentOn) {
  ParameterShard ps(Options(2, 0, 1, milliseconds(60'000)));
  AsyncPush first(ps, "w0", 0, 1, 1.0f);
  ASSERT_TRUE(antdt::testing::WaitFor([&] { return ps.Stats().pending == 1; }, milliseconds(5000)));
  // A step is half done: the freeze waits for it, then takes the state.
  std::optional<absl::StatusOr<PsState>> frozen;
  std::thread freezer([&] { frozen = ps.Freeze("127.0.0.1:9", milliseconds(10'000)); });
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_FALSE(frozen.has_value());
  auto second = ps.Push("w1", 0, 1, {3.0f}, 0.5);
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE(second->moved_to.empty());  // the step it was part of completed here
  freezer.join();
  EXPECT_EQ(first.Get().step, 1);
  ASSERT_TRUE(frozen->ok()) << frozen->status();
  EXPECT_EQ((*frozen)->step, 1);
  EXPECT_FLOAT_EQ((*frozen)->parameters[0], -2.0f);
  // Every later push and pull is sent to the new server, and nothing changes.
  auto later = ps.Push("w0", 1, 1, {5.0f}, 0.5);
  ASSERT_TRUE(later.ok());
  EXPECT_EQ(later->moved_to, "127.0.0.1:9");
  EXPECT_EQ(ps.Pull().moved_to, "127.0.0.1:9");
  EXPECT_EQ(ps.Stats().pending, 0);
  EXPECT_EQ(ps.Freeze("127.0.0.1:10", milliseconds(10)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // The new server asking again (restarted before it had the state) gets it.
  auto again = ps.Freeze("127.0.0.1:9", milliseconds(10));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->step, 1);

  // The new server holds pushes until it has the state, then goes on from it.
  ParameterShard next(Options(2, 0, 1, milliseconds(60'000)));
  next.AwaitState();
  AsyncPush early(next, "w0", 1, 1, 5.0f);
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_EQ(next.Stats().pending, 0);
  ASSERT_TRUE(next.Load(**frozen).ok());
  auto w1 = next.Push("w1", 1, 1, {1.0f}, 0.5);
  ASSERT_TRUE(w1.ok());
  EXPECT_EQ(early.Get().step, 2);
  EXPECT_FLOAT_EQ(w1->parameters[0], -2.0f - 3.0f);  // (5 + 1) / 2 more
  EXPECT_EQ(next.Stats().samples, 4);
}

TEST(ParameterShardTest, FreezeWithoutABoundaryChangesNothing) {
  ParameterShard ps(Options(2, 0, 1, milliseconds(60'000)));
  AsyncPush first(ps, "w0", 0, 1, 1.0f);
  ASSERT_TRUE(antdt::testing::WaitFor([&] { return ps.Stats().pending == 1; }, milliseconds(5000)));
  EXPECT_EQ(ps.Freeze("127.0.0.1:9", milliseconds(100)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  auto second = ps.Push("w1", 0, 1, {3.0f}, 0.5);
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE(second->moved_to.empty());
  EXPECT_EQ(first.Get().step, 1);
  PsState wrong;
  wrong.parameters = {1.0f, 2.0f};
  EXPECT_EQ(ps.Load(wrong).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ps.Stats().step, 1);
}

TEST(ParameterShardTest, LoadGoesBackToACheckpointAndReleasesBlockedPushes) {
  ParameterShard ps(Options(2, 0, 1, milliseconds(60'000)));
  ASSERT_TRUE(ps.Resize(2, {}, {}).ok());
  PsState at_one;
  at_one.step = 1;
  at_one.parameters = {-2.0f};
  AsyncPush blocked(ps, "w0", 0, 1, 1.0f);  // waits for w1, which is gone
  ASSERT_TRUE(antdt::testing::WaitFor([&] { return ps.Stats().pending == 1; }, milliseconds(5000)));
  ASSERT_TRUE(ps.Load(at_one).ok());
  const PushResult r = blocked.Get();
  EXPECT_EQ(r.step, 1);
  EXPECT_FLOAT_EQ(r.parameters[0], -2.0f);
  // Its step was discarded: not averaged in, so the worker pushes it again.
  EXPECT_FALSE(r.accepted);
  EXPECT_EQ(r.generation, 1);
  EXPECT_EQ(ps.Stats().pending, 0);
}

TEST(PsCheckpointFilesTest, WrittenAtomicallyKeptAndFoundInCommon) {
  antdt::testing::TempDir tmp;
  const std::string dir = tmp.path();
  PsState s;
  s.parameters = {1.0f, 2.0f};
  for (int64_t step : {10, 20, 30, 40}) {
    s.step = step;
    ASSERT_TRUE(WriteCheckpoint(dir, "ps-0", s, 3).ok());
  }
  EXPECT_EQ(CheckpointSteps(dir, "ps-0"), (std::vector<int64_t>{20, 30, 40}));
  for (int64_t step : {20, 30}) {
    s.step = step;
    ASSERT_TRUE(WriteCheckpoint(dir, "ps-1", s, 3).ok());
  }
  EXPECT_EQ(LatestCommonCheckpoint(dir, {"ps-0", "ps-1"}), 30);
  EXPECT_EQ(LatestCommonCheckpoint(dir, {"ps-0", "ps-2"}), std::nullopt);
  auto read = ReadCheckpoint(dir, "ps-1", 30);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->parameters, s.parameters);
  EXPECT_EQ(ReadCheckpoint(dir, "ps-1", 40).status().code(), absl::StatusCode::kNotFound);
  // Another server's file under this server's name is refused.
  std::filesystem::copy_file(dir + "/ps-0/step-000000000040.ckpt",
                             dir + "/ps-1/step-000000000040.ckpt");
  EXPECT_EQ(ReadCheckpoint(dir, "ps-1", 40).status().code(), absl::StatusCode::kDataLoss);
}

TEST(TrainingTest, LossGoesDownOverTwoHundredSteps) {
  const int64_t features = 16;
  PsOptions o = Options(1, 0, features);
  o.learning_rate = 0.5;
  ParameterShard ps(o);
  std::vector<float> params = ps.Pull().parameters;
  double first = 0, last = 0;
  for (int64_t step = 0; step < 200; ++step) {
    const GradientSum g = Gradient(params, Examples(step * 32, 32, features));
    auto r = ps.Push("w0", step, 32, g.gradient, g.loss);
    ASSERT_TRUE(r.ok());
    params = r->parameters;
    if (step == 0) first = r->mean_loss;
    last = r->mean_loss;
  }
  EXPECT_NEAR(first, std::log(2.0), 1e-6);  // the untrained model
  EXPECT_LT(last, 0.75 * first);
  // Held-out records: the model learned the true direction, not the noise.
  const Evaluation trained = Evaluate(params, HeldOutExamples(2'000, features, 7));
  const Evaluation untrained =
      Evaluate(std::vector<float>(features, 0.0f), HeldOutExamples(2'000, features, 7));
  EXPECT_GT(trained.accuracy, 0.8);
  EXPECT_LT(trained.log_loss, 0.8 * untrained.log_loss);
}

}  // namespace
}  // namespace antdt::trainer
