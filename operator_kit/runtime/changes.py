"""What an informer hands its handlers: one `WatchEvent` per change it saw.

Filters (`operator_kit.filters`), mappers and the runner's handlers all receive these;
a custom filter is any callable taking one and returning a bool.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class WatchEvent:
    """A change seen by an informer.

    ``type`` is ADDED, MODIFIED or DELETED. ``object`` is the object as the cache now
    holds it (the API's dict after the cache's transforms: no ``managedFields`` by
    default); for DELETED, its last state. ``old`` is the cached object it replaced, on
    MODIFIED only (None otherwise), so a filter can compare the two.

    ``from_list`` is True when a list brought it -- the initial list, a relist after 410
    Gone, or a late handler's replay of the cache -- and False for a live watch event
    (client-go's ``isInInitialList``, extended to relists): the work queue gives the
    former low priority (`Controller.priority`)."""

    type: str
    object: dict[str, Any]
    old: dict[str, Any] | None = None
    from_list: bool = False


Handler = Callable[[WatchEvent], None]
"""A function an informer calls with each change."""
