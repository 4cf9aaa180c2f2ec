// A test NVML library (libantdt-test-nvml.so) for the local runner's
// gpu-throttle slowdowns and `antdt bench causes`: one GPU, idle and cool,
// that reports hardware thermal slowdown as its clock throttle reason while
// the file named by $ANTDT_TEST_NVML_STATE starts with "throttle". The agent
// loads it through its real NVML path (--nvml-library), as it loads
// libnvidia-ml.so.1 on a GPU node. Only the functions the agent needs to
// sample a GPU are here; the optional others stay unresolved (fields 0).
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

constexpr unsigned long long kHwThermalSlowdown = 0x40;  // NOLINT(google-runtime-int): NVML's type

bool Throttled() {
  const char* path = std::getenv("ANTDT_TEST_NVML_STATE");
  if (path == nullptr) return false;
  std::FILE* f = std::fopen(path, "r");
  if (f == nullptr) return false;
  char buf[16] = {};
  const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  return n >= 8 && std::strncmp(buf, "throttle", 8) == 0;
}

}  // namespace

extern "C" {

int nvmlInit_v2() { return 0; }
int nvmlShutdown() { return 0; }
const char* nvmlErrorString(int) { return "test NVML"; }
int nvmlDeviceGetCount_v2(unsigned int* count) {
  *count = 1;
  return 0;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void** device) {
  if (index != 0) return 2;  // NVML_ERROR_INVALID_ARGUMENT
  static int the_gpu = 0;
  *device = &the_gpu;
  return 0;
}
int nvmlDeviceGetName(void*, char* name, unsigned int length) {
  std::snprintf(name, length, "antdt test GPU");
  return 0;
}
int nvmlDeviceGetCurrentClocksThrottleReasons(void*,
                                              unsigned long long* reasons) {  // NOLINT
  *reasons = Throttled() ? kHwThermalSlowdown : 0;
  return 0;
}

}  // extern "C"
