"""The actuator's settings (the policy's ``actuator`` section): which kind writes the replicas, and for kind
process the engine commands, ports and drain. Owned here, beside the actuators; planner/policy_file.py
composes them into a policy file and checks ``kind`` against planner/actuators/registry.py."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator, model_validator

from planner.schema import StrictModel

PORT_PLACEHOLDER = "{port}"
Port = Annotated[int, Field(ge=1, le=65535)]


def _engine_command(command: list[str] | None) -> list[str] | None:
    if command is None:
        return None
    if not command or not command[0]:
        raise ValueError("must be a non-empty list: the program, then its arguments")
    if not any(PORT_PLACEHOLDER in arg for arg in command):
        raise ValueError(f"no {PORT_PLACEHOLDER} in it: every replica needs its own port; put {PORT_PLACEHOLDER} "
                         "where the engine takes its port")
    return command


class ProcessPoolSettings(StrictModel):
    """Kind process, one pool: its own command (e.g. prefill and decode with different KV roles), more env."""

    command: list[str] | None = None  # None: actuator.command
    env: dict[str, str] = Field(default_factory=dict)  # added to actuator.env

    _command = field_validator("command")(_engine_command)


class ActuatorSettings(StrictModel):
    kind: str = "kubernetes"  # one of planner/actuators/registry.py (checked by planner/policy_file.py)
    # Kind process only (planner/actuators/process.py): engine replicas as local processes.
    command: list[str] | None = None  # "{port}" and "{pool}" substituted in every argument
    port_range: tuple[Port, Port] | None = None  # [first, last], inclusive
    env: dict[str, str] = Field(default_factory=dict)
    pools: dict[str, ProcessPoolSettings] = Field(default_factory=dict)
    drain_s: float = Field(30.0, ge=0.0, le=3600.0)
    stop_grace_s: float = Field(10.0, gt=0.0, le=600.0)
    ready_timeout_s: float = Field(600.0, gt=0.0, le=7200.0)
    state_dir: str | None = None  # None: <temp dir>/planner-<policy name>; relative: to the policy's folder
    router_url: str | None = None

    _command = field_validator("command")(_engine_command)

    @field_validator("port_range")
    @classmethod
    def _ordered(cls, ports: tuple[int, int] | None) -> tuple[int, int] | None:
        if ports is not None and ports[0] > ports[1]:
            raise ValueError(f"first port {ports[0]} must be <= last port {ports[1]}")
        return ports

    @model_validator(mode="after")
    def _process_fields(self) -> ActuatorSettings:
        if self.kind == "process":
            if self.port_range is None:
                raise ValueError("actuator.port_range is required for kind process: [first, last] ports")
            return self
        defaults = ActuatorSettings.model_construct()
        used = [f for f in PROCESS_FIELDS if getattr(self, f) != getattr(defaults, f)]
        if used:
            raise ValueError(f"actuator.{used[0]} is used only by kind process (kind is {self.kind!r})")
        return self

    def pool_command(self, pool: str) -> tuple[list[str] | None, dict[str, str]]:
        """The command and environment of one pool's engines: its own, else the actuator's."""
        own = self.pools.get(pool)
        command = own.command if own is not None and own.command is not None else self.command
        return command, {**self.env, **(own.env if own is not None else {})}


PROCESS_FIELDS = ("command", "port_range", "env", "pools", "drain_s", "stop_grace_s", "ready_timeout_s",
                  "state_dir", "router_url")
