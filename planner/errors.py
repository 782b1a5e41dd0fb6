"""Errors meant for the user: one line naming the input and what is allowed. The CLI maps them to exits."""

from __future__ import annotations


class UserError(Exception):
    """Bad input. CLI exit code 2, no traceback."""

    exit_code = 2


class InfeasibleError(Exception):
    """The SLA cannot be met by any configuration. CLI exit code 3."""

    exit_code = 3
