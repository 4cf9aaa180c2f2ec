"""AntDT Python SDK.

`antdt.sharding` is the client of the dynamic data sharding service;
`antdt.steps` reports training steps to the node agent and receives the
Controller's directives. The gRPC stubs (`antdt.v1.sharding_pb2`,
`antdt.v1.agent_pb2`, `antdt.v1.monitor_pb2` and their `_grpc` modules) are
generated into the build tree (``build/python/antdt/v1``); this package extends
its path over every ``antdt`` directory on ``sys.path`` so that both halves
import as one package.
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
from antdt.steps import StepReporter, StepTimer  # noqa: E402

__all__ = [
    "FileSlice",
    "LeaseLostError",
    "Shard",
    "ShardingClient",
    "ShardingError",
    "StepReporter",
    "StepTimer",
]
