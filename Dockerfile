# AntDT's one runtime image: every binary, the Python SDK and the examples.
#
#   docker build -t antdt/antdt:0.1.0 .                      (or podman / buildah bud)
#   docker build --build-arg WITH_TORCH=false -t antdt/antdt:0.1.0-slim .
#
# Layout: /usr/local/bin/antdt{,-operator,-agent,-sharding-service,-ps,-trainer-worker}
# (on PATH: the pods the operator renders run them by name), the `antdt` Python package
# importable by /usr/bin/python3, /opt/antdt/examples and /opt/antdt/crds. It runs as
# user antdt (uid 65532), owns nothing it writes to but /var/lib/antdt, and works with a
# read-only root filesystem (HOME and TMPDIR are /tmp: mount an emptyDir there).
# scripts/image.sh builds it on a machine without Docker and smoke-tests it.

ARG BASE=debian:bookworm-slim

FROM ${BASE} AS build
ARG JOBS=
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      build-essential cmake pkg-config \
      libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler \
      libabsl-dev libsqlite3-dev zlib1g-dev libyaml-cpp-dev prometheus-cpp-dev libcpprest-dev \
      nlohmann-json3-dev libboost-dev libssl-dev libcli11-dev libgtest-dev libgmock-dev \
      libmimalloc-dev \
      python3 \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cmake -S . -B /build -DCMAKE_BUILD_TYPE=Release \
 && cmake --build /build -j"${JOBS:-$(nproc)}" --target \
      antdt antdt-operator antdt-agent antdt-sharding-service antdt-ps antdt-trainer-worker \
      antdt_python
# What the runtime stage installs: the Debian packages that own the shared libraries the
# binaries load (computed, so that it follows the code instead of a list kept by hand).
RUN mkdir -p /out/bin \
 && for b in antdt antdt-operator antdt-agent antdt-sharding-service antdt-ps antdt-trainer-worker; do \
      strip -o "/out/bin/$b" "/build/bin/$b"; \
    done \
 && for b in /out/bin/*; do ldd "$b" | awk '/=> \//{print $3}'; done | sort -u \
      | xargs -r readlink -f | xargs -r dpkg -S 2>/dev/null | cut -d: -f1 | sort -u \
      | grep -v '^libc6$' > /out/runtime-packages \
 && cat /out/runtime-packages \
 && cp -r /build/python/antdt /out/antdt \
 && find /out/antdt -name __pycache__ -prune -exec rm -rf {} +

FROM ${BASE}
# PyTorch (Debian's python3-torch) for the workers of examples/k8s/pytorch.yaml;
# WITH_TORCH=false leaves it out (an image about 1 GB smaller).
ARG WITH_TORCH=true
COPY --from=build /out/runtime-packages /tmp/runtime-packages
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      $(cat /tmp/runtime-packages) python3 python3-grpcio python3-protobuf python3-yaml \
      ca-certificates \
      $(if [ "$WITH_TORCH" = "true" ]; then echo python3-torch python3-numpy; fi) \
 && rm -rf /var/lib/apt/lists/* /tmp/runtime-packages \
 && groupadd --gid 65532 antdt \
 && useradd --uid 65532 --gid 65532 --no-create-home --home-dir /tmp --shell /usr/sbin/nologin antdt \
 && install -d -o 65532 -g 65532 /var/lib/antdt
COPY --from=build /out/bin/ /usr/local/bin/
COPY --from=build /out/antdt /usr/lib/python3/dist-packages/antdt
COPY examples/ /opt/antdt/examples/
COPY crds/ /opt/antdt/crds/
ENV HOME=/tmp TMPDIR=/tmp PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /var/lib/antdt
USER 65532:65532
LABEL org.opencontainers.image.title="antdt" \
      org.opencontainers.image.description="AntDT: straggler control for distributed training" \
      org.opencontainers.image.version="0.1.0"
CMD ["antdt", "--help"]
