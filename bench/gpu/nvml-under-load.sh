#!/usr/bin/env bash
# The agent's NVML collector on a real GPU: idle, then under a PyTorch bf16
# matmul load (antdt-nvml-check and the agent's /metrics), then idle again.
# Runs from a self-contained folder (binaries and the Debian libraries they
# need, with Debian's loader), made here by `bench/gpu/nvml-under-load.sh
# --package DIR`, and copied to the GPU machine; writes load.log and
# metrics.txt into $OUT. Output of one run: docs/gpu-check-h200-load.txt.
set -u
if [ "${1:-}" = "--package" ]; then
  dir=${2:?folder}; src=$(cd "$(dirname "$0")/../.." && pwd)
  mkdir -p "$dir/bin" "$dir/lib"
  cp "$src/build/bin/antdt-nvml-check" "$src/build/bin/antdt-agent" "$dir/bin/" && strip "$dir"/bin/*
  for b in "$dir"/bin/*; do ldd "$b" | awk '/=>/{print $3} /ld-linux/{print $1}'; done | sort -u |
    while read -r l; do [ -f "$l" ] && cp -L "$l" "$dir/lib/"; done
  cp "$0" "$dir/check.sh"
  exit 0
fi
cd "$(dirname "$0")"
OUT=${OUT:-.}
LD=lib/ld-linux-x86-64.so.2
run() { "$LD" --library-path lib "$@"; }
NVML=$(ldconfig -p | awk '/libnvidia-ml.so.1 /{print $NF; exit}'); echo "NVML=$NVML"
echo "== nvidia-smi"; nvidia-smi --query-gpu=name,driver_version,memory.total,utilization.gpu,clocks.sm,power.draw --format=csv
echo "== idle: antdt-nvml-check"; run bin/antdt-nvml-check "$NVML" 2>&1 | grep -v GpuSample
echo "== load: bf16 matmuls for 25 s"
PYTHONUNBUFFERED=1 python3 - <<'PY' > "$OUT/load.log" 2>&1 &
import time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16); b = torch.randn_like(a)
print("load on", torch.cuda.get_device_name(0)); t = time.time(); n = 0
while time.time() - t < 25:
    for _ in range(20): c = a @ b
    torch.cuda.synchronize(); n += 20
print("matmuls", n, "TFLOP/s", round(n * 2 * 8192**3 / (time.time() - t) / 1e12))
PY
LOAD=$!
sleep 6
echo "== under load: antdt-nvml-check"; run bin/antdt-nvml-check "$NVML" 2>&1 | grep -v GpuSample
echo "== under load: antdt-agent /metrics"
"$LD" --library-path lib bin/antdt-agent --node gpu-node --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 --ready-file /tmp/agent.ready --interval 1s --nvml-library "$NVML" > /tmp/agent.log 2>&1 &
AG=$!
for i in $(seq 1 50); do [ -s /tmp/agent.ready ] && grep -q metrics= /tmp/agent.ready && break; sleep 0.2; done
sleep 4
M=$(grep metrics= /tmp/agent.ready | cut -d= -f2)
python3 -c "import urllib.request,sys; print(urllib.request.urlopen('http://$M/metrics').read().decode())" > "$OUT/metrics.txt"
grep '^antdt_gpu_' "$OUT/metrics.txt"
kill $AG; wait $AG 2>/dev/null
echo "agent after SIGTERM:"; tail -3 /tmp/agent.log
wait $LOAD; cat "$OUT/load.log"
echo "== idle again"; sleep 3; run bin/antdt-nvml-check "$NVML" 2>&1 | grep "utilization" | head -3
