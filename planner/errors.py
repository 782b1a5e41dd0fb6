"""Errors meant for the user: one line naming the input and what is allowed. The CLI maps them to exits.

Library code names an input by its **key** (the keyword argument or configuration field, ``warmup_s``),
never by a command-line flag (``--warmup-s``): the same function is called from the CLI, from the service
and from tests, and only the CLI knows its flags. The mechanism:

- ``key``: the input the error is about. The message *starts* with it (``UserError`` prepends
  ``"<key>: "`` when it does not)::

      raise UserError(f"warmup_s: {warmup_s!r} must be >= 0", key="warmup_s")

- ``mentions``: further keys the message names in its text (advice such as "cut the span with
  start_s/duration_s"). Every whole-word occurrence of these is translated, so write them only where a
  key is meant::

      raise UserError(f"{path}: too many requests; cut the span with start_s/duration_s",
                      mentions=("start_s", "duration_s"))

- The CLI (``planner.cli``) runs each command under a translation table built from that command's own
  options (``warmup_s`` and ``--warmup-s`` both map to ``--warmup-s``) and shows
  ``exc.for_flags(table)``: the leading key and every mention become the flag the user typed, so the
  user still reads ``--warmup-s: ...``. A key the command has no flag for stays as it is.

A test (tests/test_layout.py) asserts that no module outside ``planner/commands`` and ``planner/cli.py``
raises a message containing ``--``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping


def _word(key: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![\w-]){re.escape(key)}(?![\w-])")


class UserError(Exception):
    """Bad input. CLI exit code 2, no traceback."""

    exit_code = 2

    def __init__(self, message: str, key: str | None = None, mentions: tuple[str, ...] = ()) -> None:
        if key is not None and not _word(key).match(message):
            message = f"{key}: {message}"
        super().__init__(message)
        self.key = key
        self.mentions = tuple(mentions)

    def __reduce__(self) -> tuple[type[UserError], tuple[str, str | None, tuple[str, ...]]]:
        # Errors cross process boundaries (the offline search's worker pool); keep the keys on the way.
        return type(self), (str(self), self.key, self.mentions)

    def for_flags(self, flags: Mapping[str, str]) -> UserError:
        """This error with its key and mentions spelled as ``flags`` (key -> flag) where one exists."""
        text = str(self)
        if self.key is not None and self.key in flags and _word(self.key).match(text):
            text = flags[self.key] + text[len(self.key):]
        for key in self.mentions:
            if key in flags:
                text = flags[key].join(_word(key).split(text))
        return UserError(text)


def not_utf8(path: object, exc: UnicodeDecodeError, whole_file: bool = True, key: str | None = None) -> UserError:
    """The one-line error for a file that is not UTF-8 text: the file, the first byte that is not and, where
    the whole file was decoded at once, its line (a streamed read only knows its chunk)."""
    byte = bytes(exc.object[exc.start:exc.start + 1]).hex()
    line = bytes(exc.object[:exc.start]).count(b"\n") + 1
    where = f" on line {line}" if whole_file else ""
    return UserError(f"{path}: not UTF-8 text (byte 0x{byte}{where}); save it as UTF-8", key=key)


class InfeasibleError(Exception):
    """The SLA cannot be met by any configuration. CLI exit code 3."""

    exit_code = 3
