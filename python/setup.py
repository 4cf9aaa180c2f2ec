"""Builds the antdt package with its gRPC stubs.

The stubs (``antdt/v1/{sharding,monitor,agent}_pb2{,_grpc}.py``) are generated
into the build directory by ``protoc`` and ``grpc_python_plugin`` (Debian:
protobuf-compiler, protobuf-compiler-grpc) from ``proto/antdt/v1/*.proto``:
``../proto`` next to this directory, as in the repository, or
``$ANTDT_PROTO_DIR`` when the build runs elsewhere (a copy of python/ alone).
The metadata is in pyproject.toml.
"""

import os
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.errors import FileError

HERE = os.path.dirname(os.path.abspath(__file__))
# The services the SDK talks to, and what they import (agent.proto imports monitor.proto).
PROTO_NAMES = ("sharding", "monitor", "agent")


def proto_files(proto_dir):
    """The .proto files the stubs come from, or FileError naming what is missing."""
    files = [os.path.join(proto_dir, "antdt", "v1", f"{name}.proto") for name in PROTO_NAMES]
    missing = [f for f in files if not os.path.isfile(f)]
    if missing:
        raise FileError(
            f"proto files not found at {os.path.join(proto_dir, 'antdt', 'v1')} "
            f"(missing {', '.join(os.path.basename(f) for f in missing)}); build from the "
            "AntDT source tree (python/ next to proto/) or set ANTDT_PROTO_DIR to its proto/")
    return files


def tool(name, package):
    """The path of the program ``name``, or FileError naming its Debian package."""
    path = shutil.which(name)
    if path is None:
        raise FileError(f"{name} not found on PATH (Debian: apt-get install {package})")
    return path


class BuildPyWithStubs(build_py):
    """build_py, then protoc: the stubs land in the build directory next to the SDK."""

    def run(self):
        super().run()
        proto_dir = os.path.normpath(
            os.environ.get("ANTDT_PROTO_DIR") or os.path.join(HERE, "..", "proto"))
        protos = proto_files(proto_dir)
        plugin = tool("grpc_python_plugin", "protobuf-compiler-grpc")
        command = [
            tool("protoc", "protobuf-compiler"),
            f"--proto_path={proto_dir}",
            f"--python_out={self.build_lib}",
            f"--grpc_python_out={self.build_lib}",
            f"--plugin=protoc-gen-grpc_python={plugin}",
            *protos,
        ]
        self.announce(" ".join(command), level=2)
        subprocess.run(command, check=True)
        open(os.path.join(self.build_lib, "antdt", "v1", "__init__.py"), "a").close()


setup(cmdclass={"build_py": BuildPyWithStubs})
