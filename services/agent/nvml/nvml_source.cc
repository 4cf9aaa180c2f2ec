#include "services/agent/nvml/nvml_source.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/log.h"

namespace antdt::agent {

using antdt::v1::GpuSample;

GpuSource::~GpuSource() = default;

namespace {

// NVML_DEVICE_NAME_V2_BUFFER_SIZE and NVML_DEVICE_UUID_V2_BUFFER_SIZE.
constexpr unsigned int kStringBufferSize = 96;

std::string ErrorString(const NvmlApi& api, nvml::Return code) {
  const char* text = api.error_string != nullptr ? api.error_string(code) : nullptr;
  return absl::StrCat(text != nullptr ? text : "NVML error", " (", code, ")");
}

// Resolves symbol into *fn; false when the library does not export it.
template <typename Fn>
bool Resolve(void* library, const char* symbol, Fn* fn) {
  *fn = reinterpret_cast<Fn>(dlsym(library, symbol));
  return *fn != nullptr;
}

absl::Status ResolveApi(void* library, NvmlApi* api) {
  const char* missing = nullptr;
  auto require = [&](const char* symbol, auto* fn) {
    if (!Resolve(library, symbol, fn) && missing == nullptr) missing = symbol;
  };
  require("nvmlInit_v2", &api->init);
  require("nvmlShutdown", &api->shutdown);
  require("nvmlDeviceGetCount_v2", &api->device_count);
  require("nvmlDeviceGetHandleByIndex_v2", &api->device_handle);
  if (missing != nullptr) return absl::NotFoundError(absl::StrCat("library lacks ", missing));
  Resolve(library, "nvmlErrorString", &api->error_string);
  Resolve(library, "nvmlDeviceGetName", &api->name);
  Resolve(library, "nvmlDeviceGetUUID", &api->uuid);
  Resolve(library, "nvmlDeviceGetUtilizationRates", &api->utilization);
  Resolve(library, "nvmlDeviceGetMemoryInfo", &api->memory);
  Resolve(library, "nvmlDeviceGetClockInfo", &api->clock);
  Resolve(library, "nvmlDeviceGetMaxClockInfo", &api->max_clock);
  Resolve(library, "nvmlDeviceGetPowerUsage", &api->power_usage);
  Resolve(library, "nvmlDeviceGetTemperature", &api->temperature);
  if (!Resolve(library, "nvmlDeviceGetCurrentClocksThrottleReasons", &api->throttle_reasons)) {
    Resolve(library, "nvmlDeviceGetCurrentClocksEventReasons", &api->throttle_reasons);
  }
  Resolve(library, "nvmlDeviceGetTotalEccErrors", &api->total_ecc_errors);
  return absl::OkStatus();
}

}  // namespace

std::unique_ptr<GpuSource> NvmlGpuSource::Open(const std::string& library_path) {
  std::vector<std::string> candidates = {library_path};
  if (library_path.empty()) candidates = {"libnvidia-ml.so.1", "libnvidia-ml.so"};
  void* library = nullptr;
  std::string loaded;
  std::string reason;
  for (const std::string& candidate : candidates) {
    library = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (library != nullptr) {
      loaded = candidate;
      break;
    }
    const char* error = dlerror();
    absl::StrAppend(&reason, reason.empty() ? "" : "; ",
                    error != nullptr ? error : candidate + ": dlopen failed");
  }
  if (library == nullptr) {
    LogEvent("gpu_metrics_unavailable", {{"reason", reason}});
    return nullptr;
  }
  NvmlApi api;
  if (absl::Status status = ResolveApi(library, &api); !status.ok()) {
    dlclose(library);
    LogEvent("gpu_metrics_unavailable", {{"reason", absl::StrCat(loaded, ": ", status.message())}});
    return nullptr;
  }
  absl::StatusOr<std::unique_ptr<NvmlGpuSource>> source =
      Create(api, library, "nvml library=" + loaded);
  if (!source.ok()) {
    LogEvent("gpu_metrics_unavailable",
             {{"reason", absl::StrCat(loaded, ": ", source.status().message())}});
    return nullptr;
  }
  return *std::move(source);
}

absl::StatusOr<std::unique_ptr<NvmlGpuSource>> NvmlGpuSource::Create(const NvmlApi& api,
                                                                     void* library,
                                                                     std::string description) {
  absl::Status status;
  if (api.init == nullptr || api.shutdown == nullptr || api.device_count == nullptr ||
      api.device_handle == nullptr) {
    status = absl::InvalidArgumentError(
        "NvmlApi lacks init, shutdown, device_count or "
        "device_handle");
  } else if (nvml::Return code = api.init(); code != nvml::kSuccess) {
    status = absl::UnavailableError(absl::StrCat("nvmlInit_v2: ", ErrorString(api, code)));
  }
  if (!status.ok()) {
    if (library != nullptr) dlclose(library);
    return status;
  }
  return std::unique_ptr<NvmlGpuSource>(new NvmlGpuSource(api, library, std::move(description)));
}

NvmlGpuSource::NvmlGpuSource(const NvmlApi& api, void* library, std::string description)
    : api_(api), library_(library), description_(std::move(description)) {}

NvmlGpuSource::~NvmlGpuSource() {
  api_.shutdown();
  if (library_ != nullptr) dlclose(library_);
}

template <typename Fn, typename... Args>
bool NvmlGpuSource::Read(unsigned int index, const char* field, Fn fn, Args... args) {
  std::string error;
  if (fn == nullptr) {
    error = "function not in library";
  } else if (nvml::Return code = fn(args...); code == nvml::kSuccess) {
    return true;
  } else {
    error = ErrorString(api_, code);
  }
  if (logged_failures_.emplace(index, field).second) {
    LogEvent("gpu_field_unavailable", {{"gpu", index}, {"field", field}, {"error", error}});
  }
  return false;
}

absl::StatusOr<std::vector<GpuSample>> NvmlGpuSource::Sample() {
  unsigned int count = 0;
  if (nvml::Return code = api_.device_count(&count); code != nvml::kSuccess) {
    return absl::UnavailableError(absl::StrCat("nvmlDeviceGetCount_v2: ", ErrorString(api_, code)));
  }
  std::vector<GpuSample> samples(count);
  for (unsigned int i = 0; i < count; ++i) {
    GpuSample& sample = samples[i];
    sample.set_index(static_cast<int32_t>(i));
    // A device without a handle (e.g. lost) keeps its place with only its index set.
    nvml::Device device = nullptr;
    if (!Read(i, "handle", api_.device_handle, i, &device)) continue;

    char text[kStringBufferSize] = {};
    if (Read(i, "name", api_.name, device, text, kStringBufferSize)) {
      sample.set_name(std::string(text, strnlen(text, sizeof(text))));
    }
    std::memset(text, 0, sizeof(text));
    if (Read(i, "uuid", api_.uuid, device, text, kStringBufferSize)) {
      sample.set_uuid(std::string(text, strnlen(text, sizeof(text))));
    }
    nvml::Utilization utilization{};
    if (Read(i, "utilization", api_.utilization, device, &utilization)) {
      sample.set_utilization(utilization.gpu / 100.0);
    }
    nvml::Memory memory{};
    if (Read(i, "memory", api_.memory, device, &memory)) {
      sample.set_memory_used_bytes(static_cast<int64_t>(memory.used));
      sample.set_memory_total_bytes(static_cast<int64_t>(memory.total));
    }
    unsigned int value = 0;
    if (Read(i, "sm_clock", api_.clock, device, nvml::kClockSm, &value)) {
      sample.set_sm_clock_mhz(static_cast<int32_t>(value));
    }
    if (Read(i, "max_sm_clock", api_.max_clock, device, nvml::kClockSm, &value)) {
      sample.set_max_sm_clock_mhz(static_cast<int32_t>(value));
    }
    if (Read(i, "power", api_.power_usage, device, &value)) {
      sample.set_power_watts(value / 1000.0);
    }
    if (Read(i, "temperature", api_.temperature, device, nvml::kTemperatureGpu, &value)) {
      sample.set_temperature_celsius(static_cast<int32_t>(value));
    }
    unsigned long long reasons = 0;
    if (Read(i, "throttle_reasons", api_.throttle_reasons, device, &reasons)) {
      sample.set_throttle_reasons(reasons);
      sample.set_thermal_throttling(
          (reasons & (nvml::kThrottleSwThermalSlowdown | nvml::kThrottleHwThermalSlowdown)) != 0);
      sample.set_power_throttling(
          (reasons & (nvml::kThrottleSwPowerCap | nvml::kThrottleHwPowerBrakeSlowdown)) != 0);
    }
    unsigned long long ecc = 0;
    if (Read(i, "ecc_uncorrected_errors", api_.total_ecc_errors, device,
             nvml::kMemoryErrorUncorrected, nvml::kAggregateEcc, &ecc)) {
      sample.set_ecc_uncorrected_errors(static_cast<int64_t>(ecc));
    }
    // xid_errors stays 0: see the class comment.
  }
  return samples;
}

absl::StatusOr<std::vector<GpuSample>> FakeGpuSource::Sample() {
  if (!next_error_.ok()) return std::exchange(next_error_, absl::OkStatus());
  return samples_;
}

std::string FakeGpuSource::Describe() const { return absl::StrCat("fake gpus=", samples_.size()); }

std::string ThrottleReasonsToString(uint64_t mask) {
  static constexpr std::pair<uint64_t, const char*> kNames[] = {
      {nvml::kThrottleGpuIdle, "gpu_idle"},
      {nvml::kThrottleApplicationsClocksSetting, "applications_clocks_setting"},
      {nvml::kThrottleSwPowerCap, "sw_power_cap"},
      {nvml::kThrottleHwSlowdown, "hw_slowdown"},
      {nvml::kThrottleSyncBoost, "sync_boost"},
      {nvml::kThrottleSwThermalSlowdown, "sw_thermal"},
      {nvml::kThrottleHwThermalSlowdown, "hw_thermal"},
      {nvml::kThrottleHwPowerBrakeSlowdown, "hw_power_brake"},
      {nvml::kThrottleDisplayClockSetting, "display_clock_setting"},
  };
  if (mask == 0) return "none";
  std::string out;
  uint64_t named = 0;
  for (const auto& [bit, name] : kNames) {
    named |= bit;
    if ((mask & bit) != 0) absl::StrAppend(&out, out.empty() ? "" : "|", name);
  }
  if (uint64_t unknown = mask & ~named; unknown != 0) {
    char hex[32];
    std::snprintf(hex, sizeof(hex), "unknown(0x%llx)", static_cast<unsigned long long>(unknown));
    absl::StrAppend(&out, out.empty() ? "" : "|", hex);
  }
  return out;
}

}  // namespace antdt::agent
