"""How each request to Prometheus authenticates: the policy's ``metrics`` auth fields made into request
settings (headers, basic auth, TLS verification), with secrets read from files or the environment.

- ``bearer_token_file``: read at the first request and again whenever the file changes (a Kubernetes Secret
  or a projected ServiceAccount token is rotated in place), so a rotation needs no restart.
- ``basic_auth``: the username inline, the password from ``password_file`` or ``password_env``.
- ``tls``: ``ca_file`` verifies the server against that CA; ``insecure_skip_verify`` verifies nothing.
- ``headers``: sent as they are (X-Scope-OrgID for Mimir/Cortex tenants).

A secret that cannot be read is a ``CredentialsError`` naming the key and the path or variable, never the
secret; the source turns it into NoData (the loop holds) with that one line. ``describe()`` says which
credentials were sent, for the line a 401/403 produces.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from planner.sources.settings import MetricsSettings


class CredentialsError(Exception):
    """A configured secret could not be read: one line naming the key (never the secret)."""


@dataclass
class PromAuth:
    bearer_token_file: str | None = None
    username: str | None = None
    password_file: str | None = None
    password_env: str | None = None
    ca_file: str | None = None
    insecure_skip_verify: bool = False
    headers: dict[str, str] = field(default_factory=dict)
    _token: tuple[tuple[int, int], str] | None = field(default=None, repr=False)  # ((mtime_ns, size), token)

    @classmethod
    def from_metrics(cls, metrics: MetricsSettings) -> PromAuth:
        basic = metrics.basic_auth
        return cls(bearer_token_file=metrics.bearer_token_file,
                   username=basic.username if basic else None,
                   password_file=basic.password_file if basic else None,
                   password_env=basic.password_env if basic else None,
                   ca_file=metrics.tls.ca_file, insecure_skip_verify=metrics.tls.insecure_skip_verify,
                   headers=dict(metrics.headers))

    @property
    def verify(self) -> bool | str:
        """``requests``' verify: the CA file, False (skip), or True (the system's CAs)."""
        if self.insecure_skip_verify:
            return False
        return self.ca_file if self.ca_file is not None else True

    def check(self) -> None:
        """Fail now (CredentialsError) on a CA file that is not there: unlike a token, it is not rotated."""
        if self.ca_file is not None and not Path(self.ca_file).is_file():
            raise CredentialsError(f"metrics.tls.ca_file {self.ca_file}: no such file")

    def request_headers(self) -> dict[str, str]:
        """The headers of the next request: the custom ones and the bearer token as the file holds it now."""
        out = dict(self.headers)
        if self.bearer_token_file is not None:
            out["Authorization"] = f"Bearer {self._bearer()}"
        return out

    def basic(self) -> tuple[str, str] | None:
        if self.username is None:
            return None
        if self.password_env is not None:
            password = os.environ.get(self.password_env)
            if not password:
                raise CredentialsError(f"metrics.basic_auth.password_env: environment variable "
                                       f"{self.password_env} is not set or empty")
            return self.username, password
        assert self.password_file is not None
        return self.username, _read_secret("metrics.basic_auth.password_file", self.password_file)

    def _bearer(self) -> str:
        assert self.bearer_token_file is not None
        path = self.bearer_token_file
        try:
            st = os.stat(path)
        except OSError as exc:
            raise CredentialsError(f"metrics.bearer_token_file {path}: cannot read it ({exc.strerror})") from None
        stamp = (st.st_mtime_ns, st.st_size)
        if self._token is None or self._token[0] != stamp:
            self._token = (stamp, _read_secret("metrics.bearer_token_file", path))
        return self._token[1]

    def describe(self) -> str:
        """Which credentials went out, by key (for the line a 401 or 403 gives)."""
        if self.bearer_token_file is not None:
            return f"the bearer token from metrics.bearer_token_file ({self.bearer_token_file})"
        if self.username is not None:
            source = (f"file {self.password_file}" if self.password_file is not None
                      else f"env {self.password_env}")
            return f"metrics.basic_auth (username {self.username!r}, password from {source})"
        return "no credentials (set metrics.bearer_token_file or metrics.basic_auth)"


def _read_secret(key: str, path: str) -> str:
    try:
        text = Path(path).read_text().strip()
    except OSError as exc:
        raise CredentialsError(f"{key} {path}: cannot read it ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise CredentialsError(f"{key} {path}: not UTF-8 text; save the secret as UTF-8") from None
    if not text or "\n" in text:
        raise CredentialsError(f"{key} {path}: must hold one line (the secret), "
                               f"got {'nothing' if not text else 'several lines'}")
    return text
