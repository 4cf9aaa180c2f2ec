"""AntDT Python SDK.

`antdt.sharding` is the client of the dynamic data sharding service;
`antdt.steps` reports training steps to the node agent and receives the
Controller's directives. The gRPC stubs (`antdt.v1.sharding_pb2`,
`antdt.v1.agent_pb2`, `antdt.v1.monitor_pb2` and their `_grpc` modules) are
generated from ``proto/antdt/v1`` by the build: ``pip install ./python``
installs them with the package, and the CMake build assembles the whole
package in ``build/python`` (``PYTHONPATH=build/python``).
"""

__version__ = "0.1.0"

from antdt.sharding import (
    FileSlice,
    LeaseLostError,
    Shard,
    ShardingClient,
    ShardingError,
)
from antdt.steps import StepReporter, StepTimer

__all__ = [
    "FileSlice",
    "LeaseLostError",
    "Shard",
    "ShardingClient",
    "ShardingError",
    "StepReporter",
    "StepTimer",
]
