"""YAML parsing through libyaml when PyYAML was built with it, refusing duplicate keys.

PyYAML's pure-Python loader takes ~0.2 s for the bundled calibration and GPU files, a fixed
cost on every ``servesim predict`` and on every process of ``servesim validate``; the C
loader reads the same documents into the same objects, with the same error marks, about
ten times faster.

YAML says a mapping's keys are unique, but PyYAML keeps the last of two equal keys
silently: ``workers: 2`` followed by ``workers: 3`` would run 3 workers with nothing said.
The loaders here raise a :class:`yaml.constructor.ConstructorError` naming both lines.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.constructor import ConstructorError

_BASE = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _UniqueKeyLoader(_BASE):  # type: ignore[misc, valid-type]
    """The safe loader (C parser when available) with duplicate mapping keys as errors."""

    def construct_mapping(self, node, deep=False):  # noqa: D401 - PyYAML's hook
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, Any] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:  # an unhashable key: the base class words that error
                    continue
                if first is not None:
                    raise ConstructorError(
                        None, None,
                        f"duplicate key {key!r} (first on line {first.start_mark.line + 1}); "
                        "a key may appear once per section",
                        key_node.start_mark)
                seen[key] = key_node
        return super().construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor("tag:yaml.org,2002:map", _UniqueKeyLoader.construct_yaml_map)


def safe_load(text: str) -> Any:
    """``yaml.safe_load`` with the C loader when available; duplicate keys are errors."""
    return yaml.load(text, Loader=_UniqueKeyLoader)


def key_lines(text: str) -> dict[tuple, int]:
    """1-based line of every key (and list item) of a YAML document, by its path of keys and
    indices, for error messages; empty when the text does not parse."""
    try:
        root = yaml.compose(text, Loader=_BASE)
    except yaml.YAMLError:
        return {}
    lines: dict[tuple, int] = {}

    def walk(node, path: tuple) -> None:
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                if isinstance(k, yaml.ScalarNode):
                    key = (*path, k.value)
                    lines[key] = k.start_mark.line + 1
                    walk(v, key)
        elif isinstance(node, yaml.SequenceNode):
            for i, v in enumerate(node.value):
                key = (*path, i)
                lines[key] = v.start_mark.line + 1
                walk(v, key)

    if root is not None:
        walk(root, ())
    return lines
