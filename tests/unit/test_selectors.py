"""Label selectors, specified by what the API server answers to ``?labelSelector=``.

Each row of `MATCHES` is a selector the server accepts and the objects of `OBJECTS` it
returns for it; each row of `REJECTED` is one it refuses (400) and the message it gives.
The cache must answer the same: ``tests/cluster/test_selector_differential.py`` puts
these very rows to a real API server (and 400 random selectors more) and fails on any
difference, so this table is the server's behaviour, not our guess at it.
"""

from __future__ import annotations

import itertools
import random

import pytest

from operator_kit.runtime.cache import LabelSelector
from operator_kit.runtime.selectors import Requirement, Selector, from_labels, parse

OBJECTS: dict[str, dict[str, str]] = {
    "web": {"app": "web"},
    "db": {"app": "db"},
    "blank": {"app": ""},                      # the label is there, empty
    "bare": {},
    "web-db": {"app": "web", "tier": "db"},
    "prefixed": {"example.com/tier": "front"},
    "n5": {"n": "5"},
    "n05": {"n": "05"},                        # an integer too, for > and <
    "nx": {"n": "x"},                          # not an integer: never > or < anything
    "nmax": {"n": "9223372036854775807"},      # the largest int64
}
EVERYTHING = list(OBJECTS)
WITHOUT_APP = ["bare", "prefixed", "n5", "n05", "nx", "nmax"]

MATCHES: list[tuple[str, list[str]]] = [
    # empty: everything
    ("", EVERYTHING),
    ("   ", EVERYTHING),
    # existence
    ("app", ["web", "db", "blank", "web-db"]),
    ("!app", WITHOUT_APP),
    ("! app", WITHOUT_APP),
    ("app,tier", ["web-db"]),
    ("in", []),                                # a key named "in": nothing has it
    # equality; an absent label is "not equal"
    ("app=web", ["web", "web-db"]),
    ("app==web", ["web", "web-db"]),
    ("  app = web  ", ["web", "web-db"]),
    ("app!=web", ["db", "blank", *WITHOUT_APP]),
    ("app=", ["blank"]),                       # the empty value
    ("app==,tier", []),                        # app equal to "" and tier present
    ("app=web,tier=db", ["web-db"]),
    (" app=web , tier=db ", ["web-db"]),
    ("example.com/tier=front", ["prefixed"]),
    # sets: an empty element is the empty value
    ("app in (web,db)", ["web", "db", "web-db"]),
    ("app in(web)", ["web", "web-db"]),
    ("app in ( web , db )", ["web", "db", "web-db"]),
    ("app in (web,)", ["web", "blank", "web-db"]),
    ("app in (,web)", ["web", "blank", "web-db"]),
    ("app in (web,,db)", ["web", "db", "blank", "web-db"]),
    ("app in ()", ["blank"]),
    ("app in (,)", ["blank"]),
    ("app notin (web)", ["db", "blank", *WITHOUT_APP]),
    ("app notin ()", ["web", "db", "web-db", *WITHOUT_APP]),
    ("in in (in)", []),                        # in/notin are keywords only as operators
    ("app in (web),!tier", ["web"]),
    ("tier notin (db),app", ["web", "db", "blank"]),
    # integers: the label must exist and be an int64
    ("n>4", ["n5", "n05", "nmax"]),
    ("n<6", ["n5", "n05"]),
    ("n>4,n<6", ["n5", "n05"]),
    ("n>05", ["nmax"]),                        # "05" is 5
    ("n>9223372036854775806", ["nmax"]),
    ("app>1", []),                             # app is never an integer here
    # a NUL where a token would start ends the selector, as in the Go lexer
    ("app=web \x00 ( anything", ["web", "web-db"]),
]

# The server's explanations of label key and value rules, which its messages quote.
_KEY_RULE = ("must consist of alphanumeric characters, '-', '_' or '.', and must start and "
             "end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or "
             "'123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?"
             "[A-Za-z0-9]')")
_VALUE_RULE = ("a valid label must be an empty string or consist of alphanumeric characters, "
               "'-', '_' or '.', and must start and end with an alphanumeric character (e.g. "
               "'MyValue',  or 'my_value',  or '12345', regex used for validation is "
               "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')")
_PREFIX_RULE = ("prefix part a lowercase RFC 1123 subdomain must consist of lower case "
                "alphanumeric characters, '-' or '.', and must start and end with an "
                "alphanumeric character (e.g. 'example.com', regex used for validation is "
                "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
_REQ = "unable to parse requirement: "
_A64 = "a" * 64

REJECTED: list[tuple[str, str]] = [
    # commas: none trailing, none leading, none doubled
    ("app=web,", "found '', expected: identifier after ','"),
    (",app=web", "found ',', expected: !, identifier, or 'end of string'"),
    ("app=web,,tier=db", "found ',', expected: identifier after ','"),
    # keys
    ("x/y/z=1", _REQ + '<nil>: Invalid value: "x/y/z": a valid label key ' + _KEY_RULE
     + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"),
    ("-app=web", _REQ + '<nil>: Invalid value: "-app": name part ' + _KEY_RULE),
    ("example.com/=x", _REQ + '<nil>: Invalid value: "example.com/": name part must be '
     "non-empty; name part " + _KEY_RULE),
    ("/tier=x", _REQ + '<nil>: Invalid value: "/tier": prefix part must be non-empty'),
    ("Example.com/tier=x", _REQ + '<nil>: Invalid value: "Example.com/tier": ' + _PREFIX_RULE),
    (_A64, _REQ + f'<nil>: Invalid value: "{_A64}": name part must be no more than 63 bytes'),
    # values
    (f"app={_A64}", _REQ + f'values[0][app]: Invalid value: "{_A64}": must be no more '
     "than 63 bytes"),
    ("app in (web,-db)", _REQ + 'values[0][app]: Invalid value: "-db": ' + _VALUE_RULE),
    # sets
    ("app in (web db)", _REQ + "found 'db', expected: ',' or ')'"),
    ("app in web", _REQ + "found 'web' expected: '('"),
    ("app in (web", _REQ + "found '', expected: ',' or ')'"),
    ("app in (web,", _REQ + "found '', expected: ',', or identifier"),
    ("app in (!)", _REQ + "found '!', expected: ',', ')' or identifier"),
    # operators
    ("app web", _REQ + "found 'web', expected: in, notin, =, ==, !=, gt, lt"),
    ("app>=1", _REQ + "found '=', expected: identifier"),
    ("app=(web)", _REQ + "found '(', expected: identifier"),
    ("app=web=x", "found '=', expected: ',' or 'end of string'"),
    ("!app=web", "found '=', expected: ',' or 'end of string'"),
    ("!!app", _REQ + "found '!', expected: identifier"),
    # integers
    ("n>x", _REQ + "values[0]: Invalid value: \"x\": for 'Gt', 'Lt' operators, the value "
     "must be an integer"),
    ("n>", _REQ + "values[0]: Invalid value: \"\": for 'Gt', 'Lt' operators, the value must "
     "be an integer"),
    ("n>9223372036854775808", _REQ + "values[0]: Invalid value: \"9223372036854775808\": "
     "for 'Gt', 'Lt' operators, the value must be an integer"),
    ("n<-1", _REQ + 'values[0][n]: Invalid value: "-1": ' + _VALUE_RULE),
]


def _selected(selector: str) -> list[str]:
    parsed = LabelSelector.of(selector)
    return [name for name, labels in OBJECTS.items()
            if parsed.matches({"metadata": {"labels": labels}})]


@pytest.mark.parametrize(("selector", "expected"), MATCHES, ids=[repr(s) for s, _ in MATCHES])
def test_an_accepted_selector_matches_what_the_api_server_returns(
        selector: str, expected: list[str]) -> None:
    assert sorted(_selected(selector)) == sorted(expected)


@pytest.mark.parametrize(("selector", "message"), REJECTED, ids=[repr(s) for s, _ in REJECTED])
def test_a_selector_the_api_server_refuses_is_a_value_error_with_its_message(
        selector: str, message: str) -> None:
    with pytest.raises(ValueError) as raised:
        LabelSelector.of(selector)
    assert str(raised.value) == f"label selector {selector!r}: {message}"
    with pytest.raises(ValueError) as bare:
        parse(selector)
    assert str(bare.value) == message, "parse() gives the server's message alone"


# -- dicts -----------------------------------------------------------------------------------

def test_a_dict_is_every_label_equal_and_its_text_is_what_the_server_is_sent() -> None:
    selector = LabelSelector.of({"tier": "db", "app": "web"})
    assert selector.text == str(selector) == "app=web,tier=db"
    assert selector.matches({"metadata": {"labels": {"app": "web", "tier": "db", "x": "y"}}})
    assert not selector.matches({"metadata": {"labels": {"app": "web"}}})
    assert not selector.matches({"metadata": {}})
    assert LabelSelector.of({"app": ""}).matches({"metadata": {"labels": {"app": ""}}})


@pytest.mark.parametrize(("labels", "message"), [
    ({"x/y/z": "1"}, 'key: Invalid value: "x/y/z": a valid label key'),
    ({"app": "web,tier=db"}, 'values[0][app]: Invalid value: "web,tier=db": a valid label'),
    ({"app": _A64}, f'values[0][app]: Invalid value: "{_A64}": must be no more than 63 bytes'),
    ({"": "x"}, 'key: Invalid value: "": name part must be non-empty'),
])
def test_a_dict_with_a_key_or_value_the_server_refuses_is_a_value_error_naming_it(
        labels: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError) as raised:
        LabelSelector.of(labels)
    assert str(raised.value).startswith(f"label selector {labels!r}: {message}")


def test_a_dict_with_a_value_that_is_not_a_string_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="must be strings"):
        from_labels({"replicas": 3})  # type: ignore[dict-item]


def test_the_text_sent_is_the_selector_as_given() -> None:
    assert LabelSelector.of("app in (web,)").text == "app in (web,)"
    assert str(parse("tier notin (b,a), app")) == "app,tier notin (a,b)", "canonical form"


# -- the canonical form parses back to the same selector -----------------------------------

@pytest.mark.parametrize("selector", [s for s, _ in MATCHES])
def test_the_canonical_form_parses_to_the_same_selector(selector: str) -> None:
    parsed = parse(selector)
    assert parse(str(parsed)) == parsed


# -- implication: when a label-selected cache may answer a query -----------------------------

@pytest.mark.parametrize(("query", "informer", "implied"), [
    ("app=web,tier=db", "app=web", True),
    ("app=web", "app=web", True),
    ("app==web", "app=web", True),
    ("app in (web)", "app=web", True),
    ("app=web", "app in (web,db)", True),
    ("app=web", "app", True),
    ("app=web", "app!=db", True),
    ("app=web", "app notin (db,x)", True),
    ("!app", "app!=web", True),
    ("!app", "app notin (web)", True),
    ("app notin (a,b)", "app!=a", True),
    ("n>5", "n>4", True),
    ("n>5", "n", True),
    ("n>5", "n!=3", True),
    ("n<5", "n<6", True),
    ("app=web,tier=db", "tier=db,app=web", True),
    ("tier=db", "app=web", False),                     # nothing says app=web
    ("", "app=web", False),
    ("app in (web,db)", "app=web", False),
    ("app", "app=web", False),
    ("app!=db", "app=web", False),
    ("app=web", "!app", False),
    ("!app", "app", False),
    ("app!=a", "app notin (a,b)", False),
    ("app=", "app", True),                             # the empty value is a value
    ("app=", "app!=", False),
    ("n>4", "n>5", False),
    ("n>5", "n!=6", False),
    ("n>5", "n in (6,7)", False),                      # a set: never claimed
    ("app=web", "", True),                             # no selector: every object
])
def test_a_query_implies_an_informers_selector_only_when_every_match_is_cached(
        query: str, informer: str, implied: bool) -> None:
    assert parse(query).implies(parse(informer)) is implied


def _universe() -> list[dict[str, str]]:
    """Every label set over keys a and b with values from a small pool (or absent)."""
    pool = [None, "", "1", "2", "05", "x"]
    return [{k: v for k, v in zip("ab", values, strict=True) if v is not None}
            for values in itertools.product(pool, repeat=2)]


def _random_requirement(rng: random.Random) -> Requirement:
    key = rng.choice("ab")
    operator = rng.choice(["=", "==", "!=", "in", "notin", "exists", "!", "gt", "lt"])
    if operator in ("exists", "!"):
        values: list[str] = []
    elif operator in ("gt", "lt"):
        values = [rng.choice(["0", "1", "2", "5"])]
    elif operator in ("in", "notin"):
        values = rng.sample(["", "1", "2", "05", "x"], rng.randint(1, 3))
    else:
        values = [rng.choice(["", "1", "2", "05", "x"])]
    return Requirement.make(key, operator, values)


def test_implication_is_never_claimed_when_it_does_not_hold() -> None:
    """Soundness, by brute force: whenever a query is said to imply a selector, every label
    set over the universe that the query matches, the selector matches too."""
    rng = random.Random(7)
    universe = _universe()
    claimed = 0
    for _ in range(4000):
        query = Selector(tuple(_random_requirement(rng) for _ in range(rng.randint(1, 3))))
        held = Selector(tuple(_random_requirement(rng) for _ in range(rng.randint(1, 2))))
        if query.implies(held):
            claimed += 1
            wrong = [labels for labels in universe
                     if query.matches(labels) and not held.matches(labels)]
            assert wrong == [], f"{query} was said to imply {held}"
    assert claimed > 200, "the generator exercises implication, not only its absence"


def test_label_selector_implies_through_its_parsed_form() -> None:
    assert LabelSelector.of("app=web,tier=db").implies(LabelSelector.of({"app": "web"}))
    assert not LabelSelector.of("tier=db").implies(LabelSelector.of("app=web"))


def test_a_controller_or_watch_selector_the_server_would_refuse_fails_at_declaration() -> None:
    from dataclasses import dataclass

    from operator_kit import Controller, CustomResource, Watch

    @dataclass
    class ThingSpec:
        size: int = 1

    class Thing(CustomResource):
        group = "selectors.operator-kit.test"
        version = "v1"
        kind = "Thing"
        spec: ThingSpec

    class Bad(Controller[Thing]):
        resource = Thing
        label_selector = "app=web,"

    class BadWatch(Controller[Thing]):
        resource = Thing
        watches = [Watch("v1/ConfigMap", lambda cm, objects: [], label_selector="x/y/z=1")]

    with pytest.raises(ValueError, match=r"Bad.label_selector: label selector 'app=web,'"):
        Bad()
    with pytest.raises(ValueError, match=r"BadWatch.watches\[0\].label_selector"):
        BadWatch()
