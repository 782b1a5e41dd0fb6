# syntax=docker/dockerfile:1
# The planner controller. The entrypoint is `planner`; the default command runs the controller on the
# policy the Deployment mounts from the planner-policy ConfigMap at /etc/planner (deploy/base/deployment.yaml).
#
#   docker build -t planner:0.1.0 .
#
# Runs as UID/GID 65532 on a read-only root filesystem: the only writable path it needs is /tmp (HOME,
# TMPDIR, MPLCONFIGDIR), an emptyDir in the Deployment. Ports: 8080 HTTP (/metrics /healthz /readyz
# /v1/desired), 9090 gRPC (KEDA external scaler). tests/test_dockerfile.py keeps this file and deploy/ in
# agreement.
#
# Every Python package comes from requirements.lock, hash-checked, wheels only. After changing
# pyproject.toml's dependencies, regenerate it from the repository root (uv: pip install uv):
#   uv pip compile pyproject.toml deploy/build-requirements.in --universal --python-version 3.11 --generate-hashes -o requirements.lock
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/planner
COPY requirements.lock /tmp/requirements.lock
RUN /opt/planner/bin/pip install --no-deps --require-hashes --only-binary=:all: -r /tmp/requirements.lock
WORKDIR /src
COPY pyproject.toml README.md ./
COPY planner ./planner
# planner/shipped/ links to these two: the wheel carries the shipped profiles, traces and policies.
COPY profiles ./profiles
COPY policies ./policies
# The wheel is built with the locked setuptools (no network); the build tools and pip leave the runtime.
RUN /opt/planner/bin/pip install --no-deps --no-build-isolation --no-index . \
    && /opt/planner/bin/pip uninstall --yes setuptools wheel pip \
    && /opt/planner/bin/python -m compileall -q /opt/planner/lib

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="planner" \
      org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.description="SLA-driven autoscaling planner and controller for prefill/decode LLM inference" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --system --gid 65532 planner \
    && useradd --system --uid 65532 --gid 65532 --home-dir /tmp --no-create-home --shell /usr/sbin/nologin planner
# The shipped model configs, GPU table, profiles, traces and policies are in the wheel (planner/shipped/):
# `planner serve`/`planner init` find models by name, `planner demo` and the benches their defaults.
COPY --from=build /opt/planner /opt/planner
ENV PATH=/opt/planner/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    TMPDIR=/tmp \
    MPLCONFIGDIR=/tmp/matplotlib \
    XDG_CACHE_HOME=/tmp/.cache
USER 65532:65532
EXPOSE 8080 9090
HEALTHCHECK CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=3)"]
ENTRYPOINT ["planner"]
CMD ["run", "--policy", "/etc/planner/policy.yaml", "--port", "8080", "--grpc-port", "9090"]
