"""Label selectors: the cache's answer against the API server's, selector by selector.

ConfigMaps with random labels (seeded) in a namespace of their own; then, for several
hundred random selectors — from a grammar that also writes invalid ones: trailing and
doubled commas, empty sets, bad keys, 64-character values, spaces inside sets, ``>`` and
``<`` with non-integers, ``!`` in odd places — and for the fixed edge cases, compare

- whether the API server accepts it (``LIST ?labelSelector=``: 400 or not) with whether
  `LabelSelector.of` raises, and for a refused one the server's message with ours;
- for an accepted one, the names the server returns with those our matcher picks out of
  the same objects.

One LIST per selector. Any difference fails the test, printing each differing selector
with both answers.
"""

from __future__ import annotations

import json
import random
import string
import time
from dataclasses import dataclass
from typing import Any

from kubernetes.client.exceptions import ApiException

from operator_kit.runtime.cache import LabelSelector
from operator_kit.testing import Namespace

from ..unit.test_selectors import MATCHES, OBJECTS, REJECTED

SEED = 20260723
CONFIG_MAPS = 60
RANDOM_SELECTORS = 400

# Keys objects carry (all valid), and keys only selectors use (many invalid).
KEYS = ["app", "tier", "example.com/tier", "n", "in", "a.b_c-D9", "k8s.io/zone"]
BAD_KEYS = ["x/y/z", "-app", "app-", "example.com/", "/tier", "Example.com/tier", "a" * 64,
            "a b", "é", "p" * 254 + "/k", "_app"]
A63, A64 = "v" * 63, "v" * 64
VALUES = ["", "web", "db", "front", "1", "2", "05", "10", A63, "9223372036854775807",
          "in", "a.b_c-D9"]
BAD_VALUES = [A64, "-db", "db-", "web db", "_x", "é", "web\f"]
NUMBERS = ["0", "1", "2", "5", "05", "10", "-1", "+1", "x", "", "1.5", "9223372036854775807",
           "9223372036854775808", "00"]
SPACES = ["", "", "", " ", "  ", "\t", "\n"]

# The findings that started this (cache and server disagreed on each), beside the spec.
EDGE_CASES = ["app in (a,)", "app in ()", "app=web,", "x/y/z=1", "-app=web", f"app={A64}",
              "app in (web db)", "example.com/=x", "app>1", "app in (web,,db)", "app==",
              "!app,tier", "app notin ()", "n<10,n>1", "in in (in)", "app=web \x00 (((",
              "app=web,\x00", "app in (web),"]


def _space(rng: random.Random) -> str:
    return rng.choice(SPACES)


def _key(rng: random.Random) -> str:
    return rng.choice(BAD_KEYS) if rng.random() < 0.08 else rng.choice(KEYS)


def _value(rng: random.Random) -> str:
    return rng.choice(BAD_VALUES) if rng.random() < 0.06 else rng.choice(VALUES)


def _set(rng: random.Random) -> str:
    shape = rng.random()
    if shape < 0.08:
        return "()"
    if shape < 0.14:  # spaces, not commas, between elements
        return "(" + " ".join(_value(rng) or "web" for _ in range(2)) + ")"
    if shape < 0.18:  # unclosed
        return "(" + _value(rng)
    elements = [_value(rng) for _ in range(rng.randint(1, 4))]
    if rng.random() < 0.15:
        elements.append("")  # a trailing comma
    return "(" + ",".join(_space(rng) + e + _space(rng) for e in elements) + ")"


def _requirement(rng: random.Random) -> str:
    key, s = _key(rng), _space
    form = rng.choice(["exists", "absent", "=", "==", "!=", "in", "notin", ">", "<", "odd"])
    if form == "exists":
        return key
    if form == "absent":
        return "!" + s(rng) + key
    if form in ("=", "==", "!="):
        return key + s(rng) + form + s(rng) + _value(rng)
    if form in ("in", "notin"):
        return key + rng.choice([" ", "  ", "\t"]) + form + s(rng) + _set(rng)
    if form in (">", "<"):
        return key + s(rng) + form + s(rng) + rng.choice(NUMBERS)
    return rng.choice([  # "!" and operators where they do not belong
        "!!" + key, "!" + key + "=" + _value(rng), key + "!", key + ">=1", "=" + _value(rng),
        key + " in " + _value(rng), key + " " + _value(rng), key + "=" + _value(rng) + "=x",
        key + "=(" + _value(rng) + ")", "!" + key + " in (a)", key + "<>1"])


PIECES = ["app", "n", "in", "notin", "=", "==", "!", "!=", "(", ")", ",", ">", "<", " ", "",
          "1", "-", "/", ".", "web", "\t"]


def random_selector(rng: random.Random) -> str:
    if rng.random() < 0.05:  # token soup, for the lexer
        return "".join(rng.choice(PIECES) for _ in range(rng.randint(1, 10)))
    parts = [_requirement(rng) for _ in range(rng.choice([1, 1, 2, 2, 3]))]
    separator = rng.choice([",", ",", ",", ", ", " , "])
    text = separator.join(parts)
    roll = rng.random()
    if roll < 0.04:
        text += ","
    elif roll < 0.06:
        text = "," + text
    elif roll < 0.08 and len(parts) > 1:
        text = text.replace(separator, ",,", 1)
    return _space(rng) + text + _space(rng)


def random_labels(rng: random.Random) -> dict[str, str]:
    return {key: rng.choice(VALUES) for key in KEYS if rng.random() < 0.45}


# -- the two answers ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Answer:
    refused: str | None  # the message, when refused
    names: tuple[str, ...] = ()

    def __str__(self) -> str:
        return f"refused: {self.refused}" if self.refused is not None else \
            f"{len(self.names)} objects: {', '.join(self.names)}"


def server_answer(ns: Namespace, selector: str, ours: set[str]) -> Answer:
    """What one LIST with this selector returns (our objects only: the namespace also
    holds kube-root-ca.crt, which the controller manager adds when it gets round to it)."""
    try:
        listed = ns.api.request("GET", f"/api/v1/namespaces/{ns.name}/configmaps",
                                query={"labelSelector": selector})
    except ApiException as err:
        if err.status != 400:
            raise
        return Answer(json.loads(err.body)["message"])
    return Answer(None, tuple(sorted(item["metadata"]["name"] for item in listed["items"]
                                     if item["metadata"]["name"] in ours)))


def our_answer(selector: str, objects: list[dict[str, Any]]) -> Answer:
    try:
        parsed = LabelSelector.of(selector)
    except ValueError as err:
        prefix = f"label selector {selector!r}: "
        message = str(err)
        return Answer(message.removeprefix(prefix) if message.startswith(prefix)
                      else f"(our message lacks its prefix) {message}")
    return Answer(None, tuple(sorted(o["metadata"]["name"] for o in objects
                                     if parsed.matches(o))))


def compare(ns: Namespace, selectors: list[str], objects: list[dict[str, Any]]
            ) -> tuple[list[str], int]:
    """The differences, written out, and how many selectors the server refused."""
    names = {o["metadata"]["name"] for o in objects}
    differences, refused = [], 0
    for selector in dict.fromkeys(selectors):
        theirs, mine = server_answer(ns, selector, names), our_answer(selector, objects)
        refused += theirs.refused is not None
        if theirs != mine:
            differences.append(f"{selector!r}\n    server: {theirs}\n    cache:  {mine}")
    return differences, refused


def create(ns: Namespace, labelled: dict[str, dict[str, str]]) -> list[dict[str, Any]]:
    created = [ns.apply({"apiVersion": "v1", "kind": "ConfigMap",
                         "metadata": {"name": name, "labels": labels}})
               for name, labels in labelled.items()]
    assert {tuple(sorted((c["metadata"].get("labels") or {}).items())) for c in created} == \
        {tuple(sorted(labels.items())) for labels in labelled.values()}, "stored as given"
    return created


# -- the tests ---------------------------------------------------------------------------------

def test_the_specification_table_is_what_the_api_server_answers(namespace: Namespace) -> None:
    """tests/unit/test_selectors.py states the server's answers; check them on the server."""
    objects = create(namespace, {f"spec-{name}": labels for name, labels in OBJECTS.items()})
    names = {o["metadata"]["name"] for o in objects}
    wrong = []
    for selector, expected in MATCHES:
        want = Answer(None, tuple(sorted(f"spec-{n}" for n in expected)))
        if (got := server_answer(namespace, selector, names)) != want:
            wrong.append(f"{selector!r}\n    server: {got}\n    table:  {want}")
    for selector, message in REJECTED:
        if (got := server_answer(namespace, selector, names)) != Answer(message):
            wrong.append(f"{selector!r}\n    server: {got}\n    table:  refused: {message}")
    assert not wrong, "the specification disagrees with the API server:\n" + "\n".join(wrong)


def test_the_cache_and_the_api_server_agree_on_every_selector(namespace: Namespace) -> None:
    rng = random.Random(SEED)
    labelled = {f"cm-{i:02d}-{''.join(rng.choices(string.ascii_lowercase, k=4))}":
                random_labels(rng) for i in range(CONFIG_MAPS)}
    objects = create(namespace, labelled)
    randoms = [random_selector(rng) for _ in range(RANDOM_SELECTORS)]
    fixed = EDGE_CASES + [s for s, _ in MATCHES] + [s for s, _ in REJECTED]
    started = time.monotonic()
    differences, refused = compare(namespace, randoms + fixed, objects)
    elapsed = time.monotonic() - started
    tried = len(dict.fromkeys(randoms + fixed))
    print(f"\n{tried} selectors ({len(set(randoms))} random, seed {SEED}) over "
          f"{len(objects)} ConfigMaps in {elapsed:.1f}s: {refused} refused by the server, "
          f"{len(differences)} differences")
    assert not differences, (f"{len(differences)} of {tried} selectors answered differently:\n"
                             + "\n".join(differences))
    assert refused >= tried // 5, "the generator writes invalid selectors too"
    assert tried - refused >= tried // 3, "and valid ones"
