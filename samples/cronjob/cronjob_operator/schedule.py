"""Cron schedules: parse ``"*/5 * * * *"`` and find the times it fires.

A CronJob's schedule is what robfig/cron's standard parser accepts (kubebuilder's
tutorial uses it, and so does Kubernetes' CronJob controller); this is that grammar in
plain Python, so the tutorial needs no other package. Five fields — minute, hour, day
of month, month, day of week — each a comma-separated list of ``*``, ``?`` (the same as
``*``), ``N``, ``N-M``, each optionally ``/STEP`` (``N/STEP`` runs from N to the
field's maximum); months ``jan``-``dec`` and days of the week ``sun``-``sat`` by name,
in any case (``0 3 * * MON``, ``0 0 1 JAN-MAR *``); and ``@yearly``, ``@annually``,
``@monthly``, ``@weekly``, ``@daily``, ``@midnight``, ``@hourly``.

Where it differs: the times are in UTC and to the minute, so ``TZ=``/``CRON_TZ=``
(which a CronJob refuses too, for its ``timeZone`` field) and ``@every DURATION`` are
refused with a message; a field that is only commas (robfig: never fires) is refused.
As in robfig, and unlike some crons, 7 is not a day of the week (Sunday is 0).
"""

# --8<-- [start:schedule]
from __future__ import annotations

import dataclasses
import datetime as dt
import re

_MACROS = {
    "@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_MONTHS = {name: n for n, name in enumerate("jan feb mar apr may jun jul aug sep oct nov dec"
                                            .split(), start=1)}
_WEEKDAYS = {name: n for n, name in enumerate("sun mon tue wed thu fri sat".split())}
_FIELDS: tuple[tuple[str, int, int, dict[str, int]], ...] = (
    ("minute", 0, 59, {}), ("hour", 0, 23, {}), ("day of month", 1, 31, {}),
    ("month", 1, 12, _MONTHS), ("day of week", 0, 6, _WEEKDAYS))
_NUMBER = re.compile(r"\+?[0-9]+")  # as Go's strconv.Atoi takes it


@dataclasses.dataclass(frozen=True)
class Schedule:
    """The times a cron schedule fires, in UTC, to the minute."""

    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 is Sunday
    any_day: bool  # day of month is * or ?: only the day of week restricts
    any_weekday: bool

    @classmethod
    def parse(cls, text: str) -> Schedule:
        """The schedule `text` means; ValueError naming the field that does not parse."""
        if text.startswith(("TZ=", "CRON_TZ=")):
            raise ValueError(f"schedule {text!r}: a time zone in the schedule is not "
                             "accepted (nor by a CronJob); these schedules are in UTC")
        if text.startswith("@"):
            if text not in _MACROS:
                raise ValueError(f"schedule {text!r}: use one of {', '.join(_MACROS)}, or "
                                 "five fields (@every is not supported here)")
            text = _MACROS[text]
        fields = text.split()
        if len(fields) != 5:
            raise ValueError(f"schedule {text!r} needs 5 fields (minute hour day-of-month "
                             f"month day-of-week), got {len(fields)}")
        (minutes, _), (hours, _), (days, any_day), (months, _), (weekdays, any_weekday) = [
            _field(f, *spec) for f, spec in zip(fields, _FIELDS, strict=True)]
        return cls(minutes, hours, days, months, weekdays, any_day, any_weekday)

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


def _field(text: str, name: str, low: int, high: int,
           names: dict[str, int]) -> tuple[frozenset[int], bool]:
    """The values of one field, and whether it is unrestricted (``*`` or ``?`` without a
    step): a day field that is, leaves the other day field alone to decide."""
    values: set[int] = set()
    star = False

    def bad(part: str, problem: str) -> ValueError:
        return ValueError(f"schedule {name} {text!r}: {part!r} {problem}")

    def number(part: str, word: str) -> int:
        if word.lower() in names:
            return names[word.lower()]
        if not _NUMBER.fullmatch(word):
            raise bad(part, "is not a number, name, range or step")
        return int(word)

    for part in (p for p in text.split(",") if p):
        body, *steps = part.split("/")
        bounds = body.split("-")
        if len(steps) > 1 or len(bounds) > 2:
            raise bad(part, "has more than one '/' or '-'")
        if bounds[0] in ("*", "?"):
            start, end, every = low, high, True
        else:
            start = number(part, bounds[0])
            end = number(part, bounds[1]) if len(bounds) == 2 else start
            every = False
        step = 1
        if steps:
            if not _NUMBER.fullmatch(steps[0]):
                raise bad(part, "is not a number, name, range or step")
            step = int(steps[0])
            end = high if len(bounds) == 1 else end  # N/STEP: from N to the maximum
        if not low <= start <= end <= high:
            raise bad(part, f"is outside {low}-{high}" if start <= end
                      else "is a range that ends before it starts")
        if step < 1:
            raise bad(part, "has a step of 0; use 1 or more")
        star = star or (every and step == 1)
        values.update(range(start, end + 1, step))
    if not values:
        raise ValueError(f"schedule {name} {text!r}: names no value")
    return frozenset(values), star
# --8<-- [end:schedule]
