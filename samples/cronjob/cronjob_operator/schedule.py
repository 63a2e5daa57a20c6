"""Cron schedules: parse ``"*/5 * * * *"`` and find the times it fires.

kubebuilder's tutorial uses robfig/cron; this is the same five-field format (minute,
hour, day of month, month, day of week) with ``*``, lists, ranges, steps and the
``@hourly``-style macros, in plain Python so the tutorial needs no other package.
"""

# --8<-- [start:schedule]
from __future__ import annotations

import dataclasses
import datetime as dt

_MACROS = {
    "@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_FIELDS = (("minute", 0, 59), ("hour", 0, 23), ("day of month", 1, 31), ("month", 1, 12),
           ("day of week", 0, 6))


@dataclasses.dataclass(frozen=True)
class Schedule:
    """The times a cron schedule fires, in UTC, to the minute."""

    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 is Sunday
    any_day: bool  # day of month is "*": only the day of week restricts
    any_weekday: bool

    @classmethod
    def parse(cls, text: str) -> Schedule:
        """The schedule `text` means; ValueError naming the field that does not parse."""
        fields = _MACROS.get(text.strip(), text).split()
        if len(fields) != 5:
            raise ValueError(f"schedule {text!r} needs 5 fields (minute hour day-of-month "
                             f"month day-of-week), got {len(fields)}")
        values = [_field(f, name, low, high)
                  for f, (name, low, high) in zip(fields, _FIELDS, strict=True)]
        weekdays = frozenset(d % 7 for d in values[4])  # 7 is Sunday too
        return cls(values[0], values[1], values[2], values[3], weekdays,
                   fields[2] == "*", fields[4] == "*")

    def _day_matches(self, day: dt.datetime) -> bool:
        weekday = (day.weekday() + 1) % 7
        if self.any_day or self.any_weekday:  # cron: either restriction, if only one is set
            return day.day in self.days and weekday in self.weekdays
        return day.day in self.days or weekday in self.weekdays

    def next_after(self, after: dt.datetime) -> dt.datetime:
        """The first time strictly after `after` at which the schedule fires."""
        t = after.astimezone(dt.timezone.utc).replace(second=0, microsecond=0)
        t += dt.timedelta(minutes=1)
        limit = t + dt.timedelta(days=366 * 5)
        while t < limit:  # skip whole months, days and hours that cannot match
            if t.month not in self.months:
                t = (t.replace(day=1, hour=0, minute=0) + dt.timedelta(days=32)).replace(day=1)
            elif not self._day_matches(t):
                t = t.replace(hour=0, minute=0) + dt.timedelta(days=1)
            elif t.hour not in self.hours:
                t = t.replace(minute=0) + dt.timedelta(hours=1)
            elif t.minute not in self.minutes:
                t += dt.timedelta(minutes=1)
            else:
                return t
        raise ValueError("the schedule never fires (a day that no month has?)")


def _field(text: str, name: str, low: int, high: int) -> frozenset[int]:
    values: set[int] = set()
    for part in text.split(","):
        body, _, step_text = part.partition("/")
        try:
            step = int(step_text) if step_text else 1
            if body == "*":
                start, end = low, high
            elif "-" in body:
                start, end = (int(x) for x in body.split("-", 1))
            else:
                start = int(body)
                end = high if step_text else start
        except ValueError:
            raise ValueError(f"schedule {name} {text!r}: {part!r} is not a number, range "
                             "or step") from None
        top = 7 if name == "day of week" else high
        if step < 1 or not low <= start <= end <= top:
            raise ValueError(f"schedule {name} {text!r}: {part!r} is outside {low}-{high}")
        values.update(range(start, end + 1, step))
    return frozenset(values)
# --8<-- [end:schedule]
