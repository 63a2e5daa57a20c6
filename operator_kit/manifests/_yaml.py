"""`to_yaml`: a deterministic YAML stream for ``kubectl apply -f -``.

Documents keep the order their builders gave their keys (apiVersion, kind, metadata
first, as people write them), strings that need it are quoted, and nothing depends on
hash order or the time: the same code gives byte-identical output.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import yaml


class Dumper(yaml.SafeDumper):
    """Block style, list items indented under their key, multi-line strings as blocks (the
    Helm chart's templates dump their literal parts with it too)."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


Dumper.add_representer(str, _str)


def to_yaml(docs: Iterable[Mapping[str, Any]]) -> str:
    """The documents as one YAML stream, separated by ``---``."""
    return yaml.dump_all(
        [dict(doc) for doc in docs], Dumper=Dumper, sort_keys=False,
        default_flow_style=False, explicit_start=True, width=100, allow_unicode=True,
    )
