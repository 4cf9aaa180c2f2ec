"""AntDT Python SDK.

`antdt.sharding` is the client of the dynamic data sharding service. The gRPC
stubs (`antdt.v1.sharding_pb2`, `antdt.v1.sharding_pb2_grpc`) are generated
into the build tree (``build/python/antdt/v1``); this package extends its path
over every ``antdt`` directory on ``sys.path`` so that both halves import as
one package.
"""

from pkgutil import extend_path

__path__ = extend_path(__path__, __name__)  # type: ignore[name-defined]

from antdt.sharding import (  # noqa: E402  (after the path is extended)
    FileSlice,
    LeaseLostError,
    Shard,
    ShardingClient,
    ShardingError,
)

__all__ = ["FileSlice", "LeaseLostError", "Shard", "ShardingClient", "ShardingError"]
