"""Printer columns: the extra columns of ``kubectl get`` a kind declares.

`PrinterColumn` is one CRD additionalPrinterColumns entry; `path_exists` says whether a
column's JSONPath can hold a value under a version's schema (a column naming a field the
schema lacks is an error when the kind is declared); `AGE` is the column every kind gets
unless it names its own (or sets ``age_column = False``). Columns are per version: a
version shows a column only where its path exists in that version's schema, and a path
no version has is an error when the CRD is written.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["AGE", "PrinterColumn", "check_columns_syntax", "path_exists"]

_COLUMN_TYPES = ("string", "integer", "number", "boolean", "date")


@dataclasses.dataclass(frozen=True)
class PrinterColumn:
    """An extra column of ``kubectl get`` (a CRD's additionalPrinterColumns entry).

    `json_path` is a simple JSONPath into the object, such as ``.spec.schedule``;
    `type` is one of string, integer, number, boolean, date (for an "Age"-style column use
    ``PrinterColumn("Age", ".metadata.creationTimestamp", type="date")``). Columns with a
    `priority` above 0 show only with ``kubectl get -o wide``.
    """

    name: str
    json_path: str
    type: str = "string"
    description: str | None = None
    priority: int | None = None
    format: str | None = None

    def __post_init__(self) -> None:
        if self.type not in _COLUMN_TYPES:
            raise ValueError(
                f"PrinterColumn {self.name!r}: type {self.type!r} is not one of "
                + ", ".join(_COLUMN_TYPES)
            )
        if not self.json_path.startswith("."):
            raise ValueError(
                f"PrinterColumn {self.name!r}: json_path {self.json_path!r} must start with "
                "'.', like '.spec.schedule'"
            )


AGE = PrinterColumn("Age", ".metadata.creationTimestamp", type="date")
_PATH_TOKEN = re.compile(r"\.([A-Za-z0-9_\-]+)|\[[^\]]*\]")


def path_exists(schema: Mapping[str, Any], json_path: str) -> bool:
    """Whether a simple JSONPath (``.spec.a.b``, ``.status.conditions[0].type``) can hold a
    value under `schema`. Paths too rich to follow here count as existing."""
    if json_path.startswith(".metadata") or any(ch in json_path for ch in "*@$"):
        return True
    tokens = list(_PATH_TOKEN.finditer(json_path))
    if "".join(t.group(0) for t in tokens) != json_path:
        return True  # not a plain path: leave it to kubectl
    node: Mapping[str, Any] = schema
    for token in tokens:
        if node.get("x-kubernetes-preserve-unknown-fields") or "additionalProperties" in node:
            return True
        if token.group(1) is None:  # [index]
            if node.get("type") != "array":
                return False
            node = node.get("items", {})
            continue
        properties = node.get("properties", {})
        if token.group(1) not in properties:
            return False
        node = properties[token.group(1)]
    return True


def check_columns_syntax(kind: str, columns: Iterable[Any]) -> None:
    """A TypeError unless each of a kind's declared `columns` is a `PrinterColumn`."""
    for column in columns:
        if not isinstance(column, PrinterColumn):
            raise TypeError(f"{kind}: printer_columns holds {column!r}; use PrinterColumn(...)")
