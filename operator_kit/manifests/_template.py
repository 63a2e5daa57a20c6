"""Helm's Go-template YAML, from documents the generator wrote for several settings.

The chart (`operator_kit.manifests._helm`) does not re-describe the documents: it asks
`operator_manifests` for them once per setting a value changes the *shape* of (one
replica or several, the managed certificate or a mounted Secret), and lets this module
find where they differ:

- `merge(condition, off, on)` is one tree for two variants of the same documents: what
  both share stays as it is, and what differs becomes a `When` (present only if the
  condition holds, or only if it does not) or an `Either` (one value or the other).
  Mappings are matched key by key, lists item by item (`difflib`; a changed item that
  keeps its ``name`` is merged field by field) and documents by kind and name
  (`merge_documents`), so a rule, an environment variable or a volume that one variant
  lacks is one ``{{- if }}`` around that item, not a second copy of the whole Deployment.
- Values that change only *text* (the namespace, the image, a Secret's name) are left in
  the documents as unique tokens (`Holes`) and become template actions when written: a
  string holding one is written double-quoted, the token replaced by ``{{ action }}``
  (``"{{ include "op.namespace" . }}"``, ``"op-installation-{{ ... }}"``), so a
  namespace named ``123`` stays a string. A `Raw` token is written unquoted (a number).
- `Block(source)` is a mapping or list taken whole from the values (``toYaml``), and
  `Splice(source)`, in a list, the values' list's items after the others.

`render(docs, holes)` writes the tree as one template file: block-style YAML, literal
text exactly as `to_yaml` writes it (a literal ``{{`` escaped for Go templates), and
``{{- if }}``/``{{- else }}``/``{{- end }}`` lines at the indentation of what they guard.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from operator_kit.manifests._yaml import Dumper

__all__ = ["Block", "Either", "Holes", "Raw", "Splice", "When", "merge", "merge_documents",
           "negate", "render"]


@dataclass(frozen=True)
class When:
    """`value`, present only when the template `condition` holds."""

    condition: str
    value: Any


@dataclass(frozen=True)
class Either:
    """`then` when the template `condition` holds, else `otherwise`."""

    condition: str
    then: Any
    otherwise: Any


@dataclass(frozen=True)
class Block:
    """A mapping or list taken whole from the values: ``{{- toYaml source | nindent }}``."""

    source: str


@dataclass(frozen=True)
class Splice:
    """In a list, the items of a list taken from the values (none when it is empty):
    ``{{- with source }}{{- toYaml . | nindent }}{{- end }}``."""

    source: str


class Raw(str):
    """A token written unquoted (its action yields a number or a boolean)."""

    __slots__ = ()


Holes = Mapping[str, str]
"""Token -> the template action that replaces it (``.Values.replicas``)."""


def negate(condition: str) -> str:
    """The template condition that holds when `condition` does not."""
    return f"not ({condition})"


def _key(value: Any) -> str:
    """A canonical, hashable form of a (tree) value, for matching list items."""
    return json.dumps(value, sort_keys=True, default=repr)


def merge(condition: str, off: Any, on: Any) -> Any:
    """One tree for `off` (the variant when `condition` does not hold) and `on` (when it
    does): equal parts as they are, differing parts as `When`/`Either` nodes."""
    if off == on:
        return off
    if isinstance(off, When) and isinstance(on, When) and off.condition == on.condition:
        return When(off.condition, merge(condition, off.value, on.value))
    if isinstance(off, Either) and isinstance(on, Either) and off.condition == on.condition:
        return Either(off.condition, merge(condition, off.then, on.then),
                      merge(condition, off.otherwise, on.otherwise))
    if isinstance(off, dict) and isinstance(on, dict):
        keys = list(on)  # in `on`'s order; a key only `off` has after its predecessor there
        for index, key in enumerate(off):
            if key not in on:
                before = list(off)[:index]
                keys.insert(max((keys.index(k) + 1 for k in before if k in keys), default=0),
                            key)
        return {key: (merge(condition, off[key], on[key]) if key in off and key in on
                      else When(condition, on[key]) if key in on
                      else When(negate(condition), off[key])) for key in keys}
    if isinstance(off, list) and isinstance(on, list):
        return _merge_sequences(condition, off, on, key=_key,
                                pair=lambda a, b: merge(condition, a, b),
                                only=When)
    return Either(condition, on, off)


def merge_documents(condition: str, off: Sequence[dict[str, Any]],
                    on: Sequence[dict[str, Any]]) -> list[Any]:
    """`merge` for two lists of documents (or `When` around one), matched by apiVersion,
    kind and name: a document only one variant has is a `When`."""
    def identity(doc: Any) -> str:
        if isinstance(doc, When):
            return identity(doc.value)
        return _key([doc.get("apiVersion"), doc.get("kind"), doc["metadata"].get("name")])
    return _merge_sequences(condition, list(off), list(on), key=identity,
                            pair=lambda a, b: merge(condition, a, b), only=When)


def _merge_sequences(condition: str, off: list[Any], on: list[Any], *,
                     key: Callable[[Any], Any], pair: Callable[[Any, Any], Any],
                     only: Callable[[str, Any], Any]) -> list[Any]:
    """Items matched by `key` are `pair`ed, and so are the mappings at the head of a
    replaced run that have the same ``name`` (one changed field, not two copies); the rest
    are `only` under the condition, or its negation."""
    matcher = difflib.SequenceMatcher(None, [key(x) for x in off], [key(x) for x in on],
                                      autojunk=False)
    out: list[Any] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        olds, news = off[i1:i2], on[j1:j2]
        same = len(olds) if tag == "equal" else 0
        while same < min(len(olds), len(news)) and _same_item(olds[same], news[same]):
            same += 1
        out += [pair(a, b) for a, b in zip(olds[:same], news[:same], strict=True)]
        out += [only(negate(condition), a) for a in olds[same:]]
        out += [only(condition, b) for b in news[same:]]
    return out


def _same_item(old: Any, new: Any) -> bool:
    """Whether two list items are one item changed: equal, or mappings of one name."""
    return old == new or (isinstance(old, dict) and isinstance(new, dict)
                          and old.get("name") == new.get("name"))


# -- writing ---------------------------------------------------------------------------

class _Quoted(str):
    """A string holding a token: written double-quoted, whatever its action yields."""

    __slots__ = ()


class _TemplateDumper(Dumper):
    """`Dumper`, writing `_Quoted` strings double-quoted and `Raw` tokens plain."""


_TemplateDumper.add_representer(_Quoted, lambda dumper, value: dumper.represent_scalar(
    "tag:yaml.org,2002:str", str(value), style='"'))
_TemplateDumper.add_representer(Raw, lambda dumper, value: dumper.represent_scalar(
    "tag:yaml.org,2002:str", str(value), style=""))


def _has_nodes(value: Any) -> bool:
    if isinstance(value, When | Either | Block | Splice):
        return True
    if isinstance(value, dict):
        return any(_has_nodes(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_nodes(v) for v in value)
    return False


class _Writer:
    """Writes one tree as template lines, its holes filled."""

    def __init__(self, holes: Holes) -> None:
        # Longest first: no token is replaced inside a longer one.
        self.holes = sorted(holes.items(), key=lambda item: -len(item[0]))

    def _mark(self, value: Any) -> Any:
        """`value` with each string that holds a token made `_Quoted`."""
        if isinstance(value, Raw):
            return value
        if isinstance(value, str) and any(token in value for token, _ in self.holes):
            return _Quoted(value)
        if isinstance(value, dict):
            return {k: self._mark(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._mark(v) for v in value]
        return value

    def literal(self, value: Any, indent: int) -> list[str]:
        """A plain part (no nodes) as `to_yaml` writes it: ``{{`` escaped, tokens filled."""
        text = yaml.dump(self._mark(value), Dumper=_TemplateDumper, sort_keys=False,
                         default_flow_style=False, width=float("inf"), allow_unicode=True)
        text = text.replace("{{", '{{ "{{" }}')
        for token, action in self.holes:
            text = text.replace(token, "{{ " + action + " }}")
        pad = " " * indent
        return [pad + line if line else line for line in text.splitlines()]

    def condition(self, condition: str, indent: int, then: list[str],
                  otherwise: list[str] | None = None) -> list[str]:
        pad = " " * indent
        lines = [f"{pad}{{{{- if {condition} }}}}", *then]
        if otherwise is not None:
            lines += [f"{pad}{{{{- else }}}}", *otherwise]
        return [*lines, f"{pad}{{{{- end }}}}"]

    def entry(self, key: str, value: Any, indent: int) -> list[str]:
        """``key: value`` in a mapping."""
        if isinstance(value, When):
            return self.condition(value.condition, indent, self.entry(key, value.value, indent))
        if isinstance(value, Either):
            return self.condition(value.condition, indent, self.entry(key, value.then, indent),
                                  self.entry(key, value.otherwise, indent))
        if isinstance(value, Block):
            return [f"{' ' * indent}{key}: {{{{- toYaml {value.source} | nindent {indent + 2} }}}}"]
        if not _has_nodes(value):
            return self.literal({key: value}, indent)
        return [f"{' ' * indent}{key}:", *self.lines(value, indent + 2)]

    def item(self, value: Any, indent: int) -> list[str]:
        """``- value`` in a list."""
        if isinstance(value, When):
            return self.condition(value.condition, indent, self.item(value.value, indent))
        if isinstance(value, Either):
            return self.condition(value.condition, indent, self.item(value.then, indent),
                                  self.item(value.otherwise, indent))
        if isinstance(value, Splice):
            return [f"{' ' * indent}{{{{- with {value.source} }}}}",
                    f"{' ' * indent}{{{{- toYaml . | nindent {indent} }}}}",
                    f"{' ' * indent}{{{{- end }}}}"]
        if not _has_nodes(value):
            return self.literal([value], indent)
        body = self.lines(value, indent + 2)
        first = body[0].lstrip()
        if isinstance(value, dict) and not first.startswith("{{"):
            return [f"{' ' * indent}- {first}", *body[1:]]
        return [f"{' ' * indent}-", *body]  # the item's first line is a condition

    def lines(self, value: Any, indent: int) -> list[str]:
        """A mapping's entries or a list's items, at `indent`; a `When` right after one
        under the opposite condition makes one ``if``/``else`` with it."""
        parts: list[tuple[Any, Any]] = (list(value.items()) if isinstance(value, dict)
                                        else [(None, v) for v in value])

        def write(key: Any, node: Any) -> list[str]:
            return self.item(node, indent) if key is None else self.entry(key, node, indent)

        out: list[str] = []
        index = 0
        while index < len(parts):
            key, node = parts[index]
            following = parts[index + 1] if index + 1 < len(parts) else None
            if following and isinstance(node, When) and isinstance(following[1], When) \
                    and negate(following[1].condition) == node.condition:
                out += self.condition(following[1].condition, indent,
                                      write(following[0], following[1].value),
                                      write(key, node.value))
                index += 2
                continue
            out += write(key, node)
            index += 1
        return out


def render(docs: Sequence[Any], holes: Holes) -> str:
    """The documents (trees, or `When` around a tree) as one template file."""
    writer = _Writer(holes)
    out: list[str] = []
    for doc in docs:
        if isinstance(doc, When):
            out += writer.condition(doc.condition, 0, ["---", *writer.lines(doc.value, 0)])
        else:
            out += ["---", *writer.lines(doc, 0)]
    return "\n".join(out) + "\n"
