// GPU metrics for the node agent. NVML is loaded with dlopen at run time, so the agent builds
// and runs on machines without a GPU driver: there, NvmlGpuSource::Open returns nullptr and the
// node simply reports no GPUs.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "antdt/v1/monitor.pb.h"

namespace antdt::agent {

// Samples every GPU of the node.
class GpuSource {
 public:
  virtual ~GpuSource();

  // One GpuSample per device, in device index order. An error means the devices could not be
  // listed at all; a field one device cannot report is left 0 and does not fail the sample.
  virtual absl::StatusOr<std::vector<antdt::v1::GpuSample>> Sample() = 0;

  // Where the samples come from, for logs ("nvml library=libnvidia-ml.so.1").
  virtual std::string Describe() const = 0;
};

// The few NVML types and constants we use, written from NVML's public API documentation so
// that no nvml.h is needed to build. C enums are passed as int, which is their ABI.
namespace nvml {

using Return = int;  // nvmlReturn_t
struct DeviceOpaque;
using Device = DeviceOpaque*;  // nvmlDevice_t

struct Utilization {  // nvmlUtilization_t, percent over NVML's last sample period
  unsigned int gpu;
  unsigned int memory;
};

struct Memory {  // nvmlMemory_t, bytes
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

inline constexpr Return kSuccess = 0;              // NVML_SUCCESS
inline constexpr Return kErrorNotSupported = 3;    // NVML_ERROR_NOT_SUPPORTED
inline constexpr int kClockSm = 1;                 // NVML_CLOCK_SM
inline constexpr int kTemperatureGpu = 0;          // NVML_TEMPERATURE_GPU
inline constexpr int kMemoryErrorUncorrected = 1;  // NVML_MEMORY_ERROR_TYPE_UNCORRECTED
inline constexpr int kAggregateEcc = 1;            // NVML_AGGREGATE_ECC

// nvmlClocksThrottleReason* bits.
inline constexpr uint64_t kThrottleGpuIdle = 0x1;
inline constexpr uint64_t kThrottleApplicationsClocksSetting = 0x2;
inline constexpr uint64_t kThrottleSwPowerCap = 0x4;
inline constexpr uint64_t kThrottleHwSlowdown = 0x8;
inline constexpr uint64_t kThrottleSyncBoost = 0x10;
inline constexpr uint64_t kThrottleSwThermalSlowdown = 0x20;
inline constexpr uint64_t kThrottleHwThermalSlowdown = 0x40;
inline constexpr uint64_t kThrottleHwPowerBrakeSlowdown = 0x80;
inline constexpr uint64_t kThrottleDisplayClockSetting = 0x100;

}  // namespace nvml

// The NVML functions NvmlGpuSource calls, resolved with dlsym; tests fill it with fakes.
// init, shutdown, device_count and device_handle are required; a null optional function
// leaves its GpuSample field 0.
struct NvmlApi {
  nvml::Return (*init)() = nullptr;                                         // nvmlInit_v2
  nvml::Return (*shutdown)() = nullptr;                                     // nvmlShutdown
  const char* (*error_string)(nvml::Return) = nullptr;                      // nvmlErrorString
  nvml::Return (*device_count)(unsigned int*) = nullptr;                    // nvmlDeviceGetCount_v2
  nvml::Return (*device_handle)(unsigned int, nvml::Device*) = nullptr;     // ..GetHandleByIndex_v2
  nvml::Return (*name)(nvml::Device, char*, unsigned int) = nullptr;        // nvmlDeviceGetName
  nvml::Return (*uuid)(nvml::Device, char*, unsigned int) = nullptr;        // nvmlDeviceGetUUID
  nvml::Return (*utilization)(nvml::Device, nvml::Utilization*) = nullptr;  // ..UtilizationRates
  nvml::Return (*memory)(nvml::Device, nvml::Memory*) = nullptr;  // nvmlDeviceGetMemoryInfo
  // (device, clock type, MHz): nvmlDeviceGetClockInfo and nvmlDeviceGetMaxClockInfo.
  nvml::Return (*clock)(nvml::Device, int, unsigned int*) = nullptr;
  nvml::Return (*max_clock)(nvml::Device, int, unsigned int*) = nullptr;
  nvml::Return (*power_usage)(nvml::Device, unsigned int*) = nullptr;       // milliwatts
  nvml::Return (*temperature)(nvml::Device, int, unsigned int*) = nullptr;  // sensor, Celsius
  // nvmlDeviceGetCurrentClocksThrottleReasons (or its newer name, ...ClocksEventReasons).
  nvml::Return (*throttle_reasons)(nvml::Device, unsigned long long*) = nullptr;
  // (device, error type, counter type, count): nvmlDeviceGetTotalEccErrors.
  nvml::Return (*total_ecc_errors)(nvml::Device, int, int, unsigned long long*) = nullptr;
};

// GPUs through NVML. Fills every GpuSample field except xid_errors, which stays 0: XID events
// only arrive through an NVML event set (nvmlEventSetCreate/nvmlEventSetWait), which would
// need a waiting thread; not collected yet. The first failure of each (device, field) is
// logged once as event=gpu_field_unavailable; the field is then 0 in every sample.
//
// Thread-compatible: NVML itself is thread-safe, but Sample() records which failures it has
// logged, so concurrent calls to Sample() need external synchronization.
class NvmlGpuSource final : public GpuSource {
 public:
  // Loads NVML from library_path, or when empty from "libnvidia-ml.so.1" then
  // "libnvidia-ml.so", and initializes it. Returns nullptr when the library cannot be loaded,
  // lacks a required function or nvmlInit fails, after logging exactly one line:
  // event=gpu_metrics_unavailable reason=...
  static std::unique_ptr<GpuSource> Open(const std::string& library_path = "");

  // The seam under Open: calls api.init. Takes ownership of library, a dlopen handle or null,
  // and closes it on failure. Logs nothing. Errors: InvalidArgument when a required function
  // is null, Unavailable when init fails.
  static absl::StatusOr<std::unique_ptr<NvmlGpuSource>> Create(const NvmlApi& api, void* library,
                                                               std::string description);

  // nvmlShutdown, then dlclose.
  ~NvmlGpuSource() override;
  NvmlGpuSource(const NvmlGpuSource&) = delete;
  NvmlGpuSource& operator=(const NvmlGpuSource&) = delete;

  absl::StatusOr<std::vector<antdt::v1::GpuSample>> Sample() override;
  std::string Describe() const override { return description_; }

 private:
  NvmlGpuSource(const NvmlApi& api, void* library, std::string description);

  // Calls fn(args...) when fn is resolved; on failure logs once per (device, field) and
  // returns false.
  template <typename Fn, typename... Args>
  bool Read(unsigned int index, const char* field, Fn fn, Args... args);

  NvmlApi api_;
  void* library_;  // dlopen handle, or null when the API was not loaded by us (tests)
  std::string description_;
  std::set<std::pair<unsigned int, std::string>> logged_failures_;
};

// A GpuSource for tests: returns the samples it holds.
// Thread-compatible.
class FakeGpuSource final : public GpuSource {
 public:
  explicit FakeGpuSource(std::vector<antdt::v1::GpuSample> samples)
      : samples_(std::move(samples)) {}

  // What later calls to Sample() return.
  void SetSamples(std::vector<antdt::v1::GpuSample> samples) { samples_ = std::move(samples); }
  // The next call to Sample() (only) returns status, which must not be OK.
  void FailNextSample(absl::Status status) { next_error_ = std::move(status); }

  absl::StatusOr<std::vector<antdt::v1::GpuSample>> Sample() override;
  std::string Describe() const override;

 private:
  std::vector<antdt::v1::GpuSample> samples_;
  absl::Status next_error_;
};

// The set bits of an NVML throttle-reason mask, in bit order, joined by '|':
// 0x28 -> "hw_slowdown|sw_thermal". 0 -> "none"; unnamed bits -> "unknown(0x...)".
std::string ThrottleReasonsToString(uint64_t mask);

}  // namespace antdt::agent
