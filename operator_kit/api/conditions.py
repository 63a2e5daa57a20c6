"""The standard status condition (metav1.Condition), and the helper that sets one.

Put ``conditions: Conditions = field(default_factory=list)`` in a status dataclass: the
schema is metav1.Condition's (``status`` one of True/False/Unknown, ``lastTransitionTime``
a date-time, ``reason`` a CamelCase word, lengths as in Kubernetes) and the list is a
``x-kubernetes-list-type: map`` keyed by ``type``, so each type appears once. The JSON
names are Kubernetes' (``observedGeneration``) whatever the resource's naming policy.

`set_condition` updates the list the way controllers do: ``lastTransitionTime`` moves
only when the status changes, and ``observedGeneration`` records which spec the
condition speaks about::

    set_condition(backup.status.conditions, "Ready", "True", reason="Scheduled",
                  message="CronJob created", observed_generation=backup.generation)

This module imports only `operator_kit.api.validation`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Annotated, Literal

from operator_kit.api.validation import ListType, MaxLength, Minimum, MinLength, Pattern

__all__ = ["Condition", "ConditionStatus", "Conditions", "find_condition", "set_condition"]

ConditionStatus = Literal["True", "False", "Unknown"]

# The patterns and lengths of k8s.io/apimachinery/pkg/apis/meta/v1 Condition.
_TYPE_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)
_REASON_PATTERN = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"


@dataclasses.dataclass
class Condition:
    """One aspect of an object's state (Ready, Degraded), as metav1.Condition."""

    type: Annotated[str, Pattern(_TYPE_PATTERN), MaxLength(316)] = dataclasses.field(
        metadata={"description": "The condition's type, in CamelCase (Ready, Degraded)."}
    )
    status: ConditionStatus = dataclasses.field(
        metadata={"description": "True, False or Unknown."}
    )
    reason: Annotated[str, Pattern(_REASON_PATTERN), MinLength(1), MaxLength(1024)] = (
        dataclasses.field(
            metadata={"description": "Why, as one CamelCase word for programs to match."}
        )
    )
    message: Annotated[str, MaxLength(32768)] = dataclasses.field(
        metadata={"description": "Why, in words for people; may be empty."}
    )
    last_transition_time: dt.datetime = dataclasses.field(
        metadata={
            "json_name": "lastTransitionTime",
            "description": "When the status last changed.",
        }
    )
    observed_generation: Annotated[int, Minimum(0)] | None = dataclasses.field(
        default=None,
        metadata={
            "json_name": "observedGeneration",
            "description": "The .metadata.generation the condition was set for.",
        },
    )


Conditions = Annotated[list[Condition], ListType("map", keys=("type",))]
"""The type of a status's ``conditions`` field: a list of `Condition`, one per type."""


def find_condition(conditions: list[Condition], type: str) -> Condition | None:
    """The condition of this type, or None."""
    for condition in conditions:
        if condition.type == type:
            return condition
    return None


def set_condition(
    conditions: list[Condition],
    type: str,
    status: ConditionStatus,
    *,
    reason: str,
    message: str = "",
    observed_generation: int | None = None,
    now: dt.datetime | None = None,
) -> Condition:
    """Add or update the condition of `type` in `conditions` (in place) and return it.

    ``lastTransitionTime`` becomes `now` (default: the current time, to the second, as
    Kubernetes writes it) only when the condition is new or its status changes; reason,
    message and ``observedGeneration`` are always updated."""
    if status not in ("True", "False", "Unknown"):
        raise ValueError(f"condition {type!r}: status {status!r} must be True, False or Unknown")
    when = (now or dt.datetime.now(dt.timezone.utc)).replace(microsecond=0)
    existing = find_condition(conditions, type)
    if existing is None:
        created = Condition(type, status, reason, message, when, observed_generation)
        conditions.append(created)
        return created
    if existing.status != status:
        existing.status = status
        existing.last_transition_time = when
    existing.reason = reason
    existing.message = message
    existing.observed_generation = observed_generation
    return existing
