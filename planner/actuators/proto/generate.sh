#!/usr/bin/env bash
# Regenerate planner/actuators/externalscaler_pb2*.py from proto/externalscaler.proto (committed, so the
# runtime needs only grpcio + protobuf). The virtual include path makes the generated imports absolute
# within the package (from planner.actuators import externalscaler_pb2).
set -euo pipefail
cd "$(dirname "$0")/../../.."
python -m grpc_tools.protoc -Iplanner/actuators=planner/actuators/proto \
  --python_out=. --grpc_python_out=. --pyi_out=. planner/actuators/proto/externalscaler.proto
