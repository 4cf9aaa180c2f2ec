// antdt-nvml-check [LIBRARY_PATH]: reads every GPU through NVML three times, one second apart,
// as the node agent does, and prints each GpuSample. Exit 0: NVML works (even with 0 GPUs);
// 1: a sample failed; 2: bad usage; 3: no NVML on this machine.
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "services/agent/nvml/nvml_source.h"

namespace {

constexpr int kSamples = 3;
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

void PrintSample(const antdt::v1::GpuSample& gpu) {
  std::printf(
      "  gpu %d \"%s\" %s: utilization=%.0f%% memory=%.2f/%.2f GiB sm_clock=%d/%d MHz "
      "power=%.1f W temperature=%d C throttle_reasons=0x%llx (%s) thermal_throttling=%s "
      "power_throttling=%s ecc_uncorrected_errors=%lld\n",
      gpu.index(), gpu.name().c_str(), gpu.uuid().c_str(), gpu.utilization() * 100,
      gpu.memory_used_bytes() / kGiB, gpu.memory_total_bytes() / kGiB, gpu.sm_clock_mhz(),
      gpu.max_sm_clock_mhz(), gpu.power_watts(), gpu.temperature_celsius(),
      static_cast<unsigned long long>(gpu.throttle_reasons()),
      antdt::agent::ThrottleReasonsToString(gpu.throttle_reasons()).c_str(),
      gpu.thermal_throttling() ? "yes" : "no", gpu.power_throttling() ? "yes" : "no",
      static_cast<long long>(gpu.ecc_uncorrected_errors()));
  std::printf("    GpuSample { %s }\n", gpu.ShortDebugString().c_str());
}

}  // namespace

int main(int argc, char** argv) {
  std::string library = argc > 1 ? argv[1] : "";
  if (argc > 2 || library == "-h" || library == "--help") {
    std::fprintf(stderr,
                 "usage: %s [LIBRARY_PATH]\n"
                 "Samples every GPU through NVML %d times, 1 s apart. LIBRARY_PATH defaults to\n"
                 "libnvidia-ml.so.1, then libnvidia-ml.so.\n",
                 argv[0], kSamples);
    return 2;
  }
  std::printf("antdt-nvml-check: %d samples of every GPU through NVML, 1 s apart\n", kSamples);
  std::unique_ptr<antdt::agent::GpuSource> source = antdt::agent::NvmlGpuSource::Open(library);
  if (source == nullptr) {
    std::printf("no NVML: GPU metrics unavailable (reason in the gpu_metrics_unavailable line)\n");
    return 3;
  }
  std::printf("source: %s\n", source->Describe().c_str());
  size_t gpus = 0;
  for (int i = 1; i <= kSamples; ++i) {
    if (i > 1) std::this_thread::sleep_for(std::chrono::seconds(1));
    absl::StatusOr<std::vector<antdt::v1::GpuSample>> samples = source->Sample();
    if (!samples.ok()) {
      std::printf("sample %d/%d FAILED: %s\n", i, kSamples, samples.status().ToString().c_str());
      return 1;
    }
    gpus = samples->size();
    std::printf("sample %d/%d: %zu GPU(s)\n", i, kSamples, gpus);
    for (const antdt::v1::GpuSample& gpu : *samples) PrintSample(gpu);
    std::fflush(stdout);
  }
  std::printf(
      "OK: %d samples of %zu GPU(s).%s\n"
      "Notes: a 0 means the GPU did not report that field (an event=gpu_field_unavailable line\n"
      "on stderr names it and the NVML error); xid_errors is not collected (always 0); the\n"
      "GpuSample text omits fields that are 0 or false.\n",
      kSamples, gpus, gpus == 0 ? " WARNING: NVML loaded but reports no GPUs." : "");
  return 0;
}
