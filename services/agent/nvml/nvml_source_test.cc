#include "services/agent/nvml/nvml_source.h"

#include <gmock/gmock.h>
#include <google/protobuf/text_format.h>
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace antdt::agent {
namespace {

using antdt::v1::GpuSample;
using ::testing::HasSubstr;

// ---- A fake NVML: two devices, the second without power or ECC readings. ----

struct FakeDevice {
  const char* name;
  const char* uuid;
  nvml::Utilization utilization;
  nvml::Memory memory;
  unsigned int sm_clock_mhz;
  unsigned int max_sm_clock_mhz;
  unsigned int power_mw;
  unsigned int temperature;
  unsigned long long throttle_reasons;
  unsigned long long ecc_uncorrected;
  bool has_power_and_ecc;
};

constexpr unsigned long long kGiB = 1ull << 30;

FakeDevice g_devices[] = {
    {"NVIDIA H200",
     "GPU-00000000-1111-2222-3333-444444444444",
     {87, 40},
     {141 * kGiB, 61 * kGiB, 80 * kGiB},
     1755,
     1980,
     612345,
     83,
     nvml::kThrottleSwPowerCap | nvml::kThrottleSwThermalSlowdown,
     2,
     true},
    {"NVIDIA H200",
     "GPU-55555555-6666-7777-8888-999999999999",
     {0, 0},
     {141 * kGiB, 140 * kGiB, 1 * kGiB},
     345,
     1980,
     0,
     31,
     nvml::kThrottleGpuIdle,
     0,
     false},
};

struct FakeNvml {
  nvml::Return init_result = nvml::kSuccess;
  nvml::Return count_result = nvml::kSuccess;
  int handle_fails_for = -1;  // device index whose handle lookup fails
  int init_calls = 0;
  int shutdown_calls = 0;
};
FakeNvml g_nvml;

FakeDevice& Dev(nvml::Device device) { return *reinterpret_cast<FakeDevice*>(device); }

NvmlApi FakeApi() {
  NvmlApi api;
  api.init = [] {
    ++g_nvml.init_calls;
    return g_nvml.init_result;
  };
  api.shutdown = [] {
    ++g_nvml.shutdown_calls;
    return nvml::kSuccess;
  };
  api.error_string = [](nvml::Return code) -> const char* {
    return code == nvml::kErrorNotSupported ? "Not Supported" : "Unknown Error";
  };
  api.device_count = [](unsigned int* count) {
    *count = 2;
    return g_nvml.count_result;
  };
  api.device_handle = [](unsigned int index, nvml::Device* device) {
    if (index >= 2 || static_cast<int>(index) == g_nvml.handle_fails_for) return 15;
    *device = reinterpret_cast<nvml::Device>(&g_devices[index]);
    return nvml::kSuccess;
  };
  api.name = [](nvml::Device device, char* out, unsigned int length) {
    std::snprintf(out, length, "%s", Dev(device).name);
    return nvml::kSuccess;
  };
  api.uuid = [](nvml::Device device, char* out, unsigned int length) {
    std::snprintf(out, length, "%s", Dev(device).uuid);
    return nvml::kSuccess;
  };
  api.utilization = [](nvml::Device device, nvml::Utilization* out) {
    *out = Dev(device).utilization;
    return nvml::kSuccess;
  };
  api.memory = [](nvml::Device device, nvml::Memory* out) {
    *out = Dev(device).memory;
    return nvml::kSuccess;
  };
  api.clock = [](nvml::Device device, int type, unsigned int* mhz) {
    if (type != nvml::kClockSm) return 2;  // NVML_ERROR_INVALID_ARGUMENT
    *mhz = Dev(device).sm_clock_mhz;
    return nvml::kSuccess;
  };
  api.max_clock = [](nvml::Device device, int type, unsigned int* mhz) {
    if (type != nvml::kClockSm) return 2;
    *mhz = Dev(device).max_sm_clock_mhz;
    return nvml::kSuccess;
  };
  api.power_usage = [](nvml::Device device, unsigned int* mw) {
    if (!Dev(device).has_power_and_ecc) return nvml::kErrorNotSupported;
    *mw = Dev(device).power_mw;
    return nvml::kSuccess;
  };
  api.temperature = [](nvml::Device device, int sensor, unsigned int* celsius) {
    if (sensor != nvml::kTemperatureGpu) return 2;
    *celsius = Dev(device).temperature;
    return nvml::kSuccess;
  };
  api.throttle_reasons = [](nvml::Device device, unsigned long long* reasons) {
    *reasons = Dev(device).throttle_reasons;
    return nvml::kSuccess;
  };
  api.total_ecc_errors = [](nvml::Device device, int error_type, int counter_type,
                            unsigned long long* count) {
    if (error_type != nvml::kMemoryErrorUncorrected || counter_type != nvml::kAggregateEcc) {
      return 2;
    }
    if (!Dev(device).has_power_and_ecc) return nvml::kErrorNotSupported;
    *count = Dev(device).ecc_uncorrected;
    return nvml::kSuccess;
  };
  return api;
}

GpuSample ParseSample(const std::string& text) {
  GpuSample sample;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &sample)) << text;
  return sample;
}

void ExpectSamplesEqual(const std::vector<GpuSample>& actual,
                        const std::vector<GpuSample>& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(actual[i], expected[i]))
        << "device " << i << "\nactual:   " << actual[i].ShortDebugString()
        << "\nexpected: " << expected[i].ShortDebugString();
  }
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

class NvmlGpuSourceTest : public ::testing::Test {
 protected:
  void SetUp() override { g_nvml = FakeNvml(); }
};

TEST_F(NvmlGpuSourceTest, ConvertsEveryFieldAndLeavesUnsupportedFieldsZero) {
  absl::StatusOr<std::unique_ptr<NvmlGpuSource>> source =
      NvmlGpuSource::Create(FakeApi(), nullptr, "nvml library=fake");
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_EQ(g_nvml.init_calls, 1);
  EXPECT_EQ((*source)->Describe(), "nvml library=fake");

  testing::internal::CaptureStderr();
  absl::StatusOr<std::vector<GpuSample>> samples = (*source)->Sample();
  std::string log = testing::internal::GetCapturedStderr();
  ASSERT_TRUE(samples.ok()) << samples.status();
  ExpectSamplesEqual(*samples, {ParseSample(R"pb(
                                  index: 0
                                  name: "NVIDIA H200"
                                  uuid: "GPU-00000000-1111-2222-3333-444444444444"
                                  utilization: 0.87
                                  memory_used_bytes: 85899345920
                                  memory_total_bytes: 151397597184
                                  sm_clock_mhz: 1755
                                  max_sm_clock_mhz: 1980
                                  power_watts: 612.345
                                  temperature_celsius: 83
                                  throttle_reasons: 0x24
                                  thermal_throttling: true
                                  power_throttling: true
                                  ecc_uncorrected_errors: 2
                                  xid_errors: 0
                                )pb"),
                                ParseSample(R"pb(
                                  index: 1
                                  name: "NVIDIA H200"
                                  uuid: "GPU-55555555-6666-7777-8888-999999999999"
                                  utilization: 0
                                  memory_used_bytes: 1073741824
                                  memory_total_bytes: 151397597184
                                  sm_clock_mhz: 345
                                  max_sm_clock_mhz: 1980
                                  power_watts: 0
                                  temperature_celsius: 31
                                  throttle_reasons: 0x1
                                  thermal_throttling: false
                                  power_throttling: false
                                  ecc_uncorrected_errors: 0
                                )pb")});
  // The unsupported fields of device 1 are logged once each.
  std::vector<std::string> lines = Lines(log);
  ASSERT_EQ(lines.size(), 2u) << log;
  EXPECT_THAT(lines[0], HasSubstr("event=gpu_field_unavailable gpu=1 field=power"));
  EXPECT_THAT(lines[0], HasSubstr("Not Supported (3)"));
  EXPECT_THAT(lines[1],
              HasSubstr("event=gpu_field_unavailable gpu=1 field=ecc_uncorrected_errors"));

  // Values change between samples; failures are not logged again.
  g_devices[0].utilization.gpu = 12;
  testing::internal::CaptureStderr();
  samples = (*source)->Sample();
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  ASSERT_TRUE(samples.ok()) << samples.status();
  ASSERT_EQ(samples->size(), 2u);
  EXPECT_EQ((*samples)[0].utilization(), 0.12);
  g_devices[0].utilization.gpu = 87;

  source->reset();
  EXPECT_EQ(g_nvml.shutdown_calls, 1);
}

TEST_F(NvmlGpuSourceTest, NullOptionalFunctionsLeaveFieldsZero) {
  NvmlApi api = FakeApi();
  api.power_usage = nullptr;
  api.throttle_reasons = nullptr;
  api.error_string = nullptr;
  absl::StatusOr<std::unique_ptr<NvmlGpuSource>> source =
      NvmlGpuSource::Create(api, nullptr, "fake");
  ASSERT_TRUE(source.ok()) << source.status();
  testing::internal::CaptureStderr();
  absl::StatusOr<std::vector<GpuSample>> samples = (*source)->Sample();
  std::string log = testing::internal::GetCapturedStderr();
  ASSERT_TRUE(samples.ok()) << samples.status();
  ASSERT_EQ(samples->size(), 2u);
  EXPECT_EQ((*samples)[0].power_watts(), 0);
  EXPECT_EQ((*samples)[0].throttle_reasons(), 0u);
  EXPECT_FALSE((*samples)[0].thermal_throttling());
  EXPECT_EQ((*samples)[0].sm_clock_mhz(), 1755);
  EXPECT_THAT(log, HasSubstr("gpu=0 field=power error=\"function not in library\""));
  // Without nvmlErrorString the code still shows.
  EXPECT_THAT(log, HasSubstr("gpu=1 field=ecc_uncorrected_errors error=\"NVML error (3)\""));
}

TEST_F(NvmlGpuSourceTest, DeviceWithoutHandleKeepsOnlyItsIndex) {
  g_nvml.handle_fails_for = 0;
  absl::StatusOr<std::unique_ptr<NvmlGpuSource>> source =
      NvmlGpuSource::Create(FakeApi(), nullptr, "fake");
  ASSERT_TRUE(source.ok()) << source.status();
  testing::internal::CaptureStderr();
  absl::StatusOr<std::vector<GpuSample>> samples = (*source)->Sample();
  std::string log = testing::internal::GetCapturedStderr();
  ASSERT_TRUE(samples.ok()) << samples.status();
  ASSERT_EQ(samples->size(), 2u);
  ExpectSamplesEqual({(*samples)[0]}, {ParseSample("index: 0")});
  EXPECT_EQ((*samples)[1].index(), 1);
  EXPECT_EQ((*samples)[1].temperature_celsius(), 31);
  EXPECT_THAT(log, HasSubstr("gpu=0 field=handle error=\"Unknown Error (15)\""));
}

TEST_F(NvmlGpuSourceTest, DeviceCountFailureFailsTheSample) {
  absl::StatusOr<std::unique_ptr<NvmlGpuSource>> source =
      NvmlGpuSource::Create(FakeApi(), nullptr, "fake");
  ASSERT_TRUE(source.ok()) << source.status();
  g_nvml.count_result = 999;
  absl::StatusOr<std::vector<GpuSample>> samples = (*source)->Sample();
  EXPECT_EQ(samples.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(samples.status().message()),
              HasSubstr("nvmlDeviceGetCount_v2: Unknown Error (999)"));
}

TEST_F(NvmlGpuSourceTest, InitFailureIsUnavailableAndDoesNotShutDown) {
  g_nvml.init_result = 9;  // NVML_ERROR_DRIVER_NOT_LOADED
  absl::StatusOr<std::unique_ptr<NvmlGpuSource>> source =
      NvmlGpuSource::Create(FakeApi(), nullptr, "fake");
  EXPECT_EQ(source.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(source.status().message()), HasSubstr("nvmlInit_v2: Unknown Error (9)"));
  EXPECT_EQ(g_nvml.shutdown_calls, 0);
}

TEST_F(NvmlGpuSourceTest, MissingRequiredFunctionIsInvalidArgument) {
  NvmlApi api = FakeApi();
  api.device_handle = nullptr;
  absl::StatusOr<std::unique_ptr<NvmlGpuSource>> source =
      NvmlGpuSource::Create(api, nullptr, "fake");
  EXPECT_EQ(source.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(g_nvml.init_calls, 0);
}

TEST(NvmlGpuSourceOpenTest, MissingLibraryReturnsNullAndLogsOneLine) {
  testing::internal::CaptureStderr();
  std::unique_ptr<GpuSource> source = NvmlGpuSource::Open("/nonexistent/libnvidia-ml.so.1");
  std::string log = testing::internal::GetCapturedStderr();
  EXPECT_EQ(source, nullptr);
  std::vector<std::string> lines = Lines(log);
  ASSERT_EQ(lines.size(), 1u) << log;
  EXPECT_THAT(lines[0], HasSubstr("event=gpu_metrics_unavailable reason="));
  EXPECT_THAT(lines[0], HasSubstr("/nonexistent/libnvidia-ml.so.1"));
}

TEST(NvmlGpuSourceOpenTest, LibraryWithoutNvmlReturnsNullAndLogsOneLine) {
  testing::internal::CaptureStderr();
  std::unique_ptr<GpuSource> source = NvmlGpuSource::Open("libm.so.6");
  std::string log = testing::internal::GetCapturedStderr();
  EXPECT_EQ(source, nullptr);
  std::vector<std::string> lines = Lines(log);
  ASSERT_EQ(lines.size(), 1u) << log;
  EXPECT_THAT(lines[0], HasSubstr("event=gpu_metrics_unavailable"));
  EXPECT_THAT(lines[0], HasSubstr("libm.so.6: library lacks nvmlInit_v2"));
}

TEST(ThrottleReasonsToStringTest, NamesBitsInBitOrder) {
  EXPECT_EQ(ThrottleReasonsToString(0), "none");
  EXPECT_EQ(ThrottleReasonsToString(nvml::kThrottleGpuIdle), "gpu_idle");
  EXPECT_EQ(ThrottleReasonsToString(nvml::kThrottleSwThermalSlowdown | nvml::kThrottleHwSlowdown),
            "hw_slowdown|sw_thermal");
  EXPECT_EQ(ThrottleReasonsToString(0x1ff),
            "gpu_idle|applications_clocks_setting|sw_power_cap|hw_slowdown|sync_boost|"
            "sw_thermal|hw_thermal|hw_power_brake|display_clock_setting");
  EXPECT_EQ(ThrottleReasonsToString(0x4 | 0x1000 | 0x8000000000000000ull),
            "sw_power_cap|unknown(0x8000000000001000)");
  EXPECT_EQ(ThrottleReasonsToString(0x200), "unknown(0x200)");
}

TEST(FakeGpuSourceTest, ReturnsSamplesFailsOnceAndChanges) {
  FakeGpuSource source({ParseSample("index: 0 utilization: 0.5")});
  EXPECT_EQ(source.Describe(), "fake gpus=1");
  absl::StatusOr<std::vector<GpuSample>> samples = source.Sample();
  ASSERT_TRUE(samples.ok());
  ExpectSamplesEqual(*samples, {ParseSample("index: 0 utilization: 0.5")});

  source.FailNextSample(absl::UnavailableError("gpu gone"));
  EXPECT_EQ(source.Sample().status(), absl::UnavailableError("gpu gone"));
  EXPECT_TRUE(source.Sample().ok());

  source.SetSamples({ParseSample("index: 0"), ParseSample("index: 1 thermal_throttling: true")});
  samples = source.Sample();
  ASSERT_TRUE(samples.ok());
  ExpectSamplesEqual(*samples,
                     {ParseSample("index: 0"), ParseSample("index: 1 thermal_throttling: true")});
}

}  // namespace
}  // namespace antdt::agent
