"""API stability markers (docs/stability.md): experimental names warn once on first use
and say so in their docstrings and docs; deprecations warn on each use and keep at least
one deprecation cycle."""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

import operator_kit
from operator_kit import ExperimentalWarning, LeaderElection, Operator, Sharding, _stability
from operator_kit._stability import deprecated, experimental
from operator_kit.fleet import FanOut, Fleet, StaticClusters

DOCS = Path(__file__).resolve().parents[2] / "docs"


@pytest.fixture(autouse=True)
def nothing_warned_yet(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(_stability, "_warned", set())
    yield


def test_an_experimental_warning_is_a_future_warning_shown_by_default() -> None:
    assert issubclass(ExperimentalWarning, FutureWarning)
    assert operator_kit.ExperimentalWarning is ExperimentalWarning
    assert "ExperimentalWarning" in operator_kit.__all__


def test_an_experimental_api_warns_once_per_process_naming_itself_and_how_to_silence() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            experimental("operator_kit.something")
        experimental("operator_kit.other")
    assert [str(w.message).split(" ")[0] for w in caught] == [
        "operator_kit.something", "operator_kit.other"]
    assert all(w.category is ExperimentalWarning for w in caught)
    assert "may change in a minor release" in str(caught[0].message)
    assert "filterwarnings('ignore', category=operator_kit.ExperimentalWarning)" in str(
        caught[0].message)


def test_sharding_warns_once_at_the_line_that_makes_it() -> None:
    with pytest.warns(ExperimentalWarning, match=r"^operator_kit\.Sharding is experimental") \
            as record:
        Sharding(controllers=["backup"])
    assert record[0].filename == __file__, "points at the user's code, not operator_kit's"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Operator("op", leader_election=LeaderElection(), sharding=Sharding())  # no second


def test_a_fleet_warns_once_at_the_line_that_makes_it() -> None:
    with pytest.warns(ExperimentalWarning, match=r"^operator_kit\.fleet is experimental") \
            as record:
        Fleet("fleet", [], StaticClusters({}))
    assert record[0].filename == __file__


def test_the_warning_can_be_silenced_as_it_says() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", category=operator_kit.ExperimentalWarning)
        Sharding()
    assert caught == []


@pytest.mark.parametrize("name", [Sharding, Fleet, FanOut, operator_kit.fleet,
                                  operator_kit.tracing], ids=lambda n: n.__name__)
def test_each_experimental_name_says_so_in_its_docstring(name: object) -> None:
    assert "**Experimental**" in (inspect.getdoc(name) or "")


@pytest.mark.parametrize("page", ["how-to/sharding.md", "how-to/fleets.md",
                                  "how-to/fleet-fanout.md", "reference/fleet.md"])
def test_each_experimental_how_to_and_reference_page_says_so(page: str) -> None:
    assert '!!! warning "Experimental"' in (DOCS / page).read_text()


def test_the_stability_page_lists_every_experimental_name() -> None:
    page = (DOCS / "stability.md").read_text()
    for name in ("`operator_kit.Sharding`", "`operator_kit.fleet`", "`operator_kit.tracing`"):
        assert name in page


def old_name() -> str:
    """A deprecated function, as a module marks one."""
    deprecated("operator_kit.old_name", since="0.2.0", removed_in="0.3.0",
               instead="operator_kit.new_name")
    return "still works"


def test_a_deprecated_name_warns_on_each_use_with_its_removal_and_replacement() -> None:
    for _ in range(2):
        with pytest.warns(DeprecationWarning) as record:
            assert old_name() == "still works"
        assert str(record[0].message) == (
            "operator_kit.old_name is deprecated since operator_kit 0.2.0 and will be "
            "removed in 0.3.0: use operator_kit.new_name")
        assert record[0].filename == __file__


@pytest.mark.parametrize(("since", "removed_in", "earliest"), [
    ("0.2.0", "0.2.5", "0.3.0"),   # 0.x: one minor release at least
    ("0.2.1", "0.1.0", "0.3.0"),
    ("1.2.0", "1.3.0", "2.0.0"),   # 1.0 on: a major release
])
def test_a_removal_sooner_than_one_deprecation_cycle_is_refused(
        since: str, removed_in: str, earliest: str) -> None:
    with pytest.raises(ValueError, match=rf"it may be removed in {earliest} at the earliest"):
        deprecated("operator_kit.x", since=since, removed_in=removed_in, instead="y")


@pytest.mark.parametrize(("since", "removed_in"), [("0.2.0", "0.3.0"), ("0.2.0", "1.0.0"),
                                                   ("1.4.2", "2.0.0")])
def test_a_removal_after_one_cycle_is_allowed(since: str, removed_in: str) -> None:
    with pytest.warns(DeprecationWarning):
        deprecated("operator_kit.x", since=since, removed_in=removed_in, instead="y")


def test_a_malformed_release_is_named() -> None:
    with pytest.raises(ValueError, match="'soon' is not a release version"):
        deprecated("operator_kit.x", since="0.2.0", removed_in="soon", instead="y")
