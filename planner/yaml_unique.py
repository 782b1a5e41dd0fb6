"""YAML for the files users write (policies, fleets): a key given twice is an error, not the last one winning.

PyYAML's safe loader keeps the last of two equal keys without a word, so a policy that sets ``interval_s``
twice, or a fleet with two ``budget:`` blocks, silently runs on whichever came last.
"""

from __future__ import annotations

from typing import Any

import yaml


class UniqueKeyLoader(yaml.SafeLoader):
    """yaml.SafeLoader that raises a ConstructorError (with the second key's line) on a repeated key."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=deep)
            try:
                line = first.setdefault(key, key_node.start_mark.line)
            except TypeError:  # an unhashable key: the base class says so
                continue
            if line != key_node.start_mark.line:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping", node.start_mark,
                    f"found the key {key!r} twice (first on line {line + 1})", key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


def load_unique(text: str) -> Any:
    """``yaml.safe_load`` with repeated keys rejected."""
    return yaml.load(text, Loader=UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)


def duplicate(exc: yaml.YAMLError) -> str:
    """``": found the key ... twice ..."`` where ``exc`` is load_unique's repeated key, else nothing."""
    problem = getattr(exc, "problem", None) or ""
    return f": {problem}" if isinstance(exc, yaml.constructor.ConstructorError) and "twice" in problem else ""
