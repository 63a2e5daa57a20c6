"""Hash ranges for server-side sharding (Kubernetes' ``ShardedListAndWatch``, KEP-5866).

With the alpha feature gate ``ShardedListAndWatch`` (Kubernetes 1.36+), a LIST or WATCH
takes ``shardSelector=shardRange(object.metadata.uid, '0x<start>', '0x<end>') || ...``
and the API server returns only the objects whose hash falls in one of the ranges. The
hash is the 64-bit FNV-1a of the field's bytes (the uid as its text, UTF-8), written as
16 lower-case hex digits; a range is ``[start, end)``, the whole space ``[0x0,
0x10000000000000000)``; the server answers a filtered LIST with
``metadata.shardInfo.selector`` echoing the selector (`tests/cluster/test_shard_ranges.py`
checks this module's hash and ranges against the real server, object by object).

This module is pure: it splits the space among members and plans moves; it talks to no
server.

**Slots.** The space is cut into `SLOTS` equal slots (slot *i* is ``[i·2⁶⁴/S,
(i+1)·2⁶⁴/S)``). `assign` gives each live member ``⌊S/N⌋`` or ``⌈S/N⌉`` slots
(consistent hashing with bounded loads): slot by slot, the member that ranks it highest
(sha1 of ``<member>#<slot>``, the ring's hash) takes it unless it already holds its
share, then the next. It depends only on the set of members, so every member computes
the same answer, and a member joining or leaving moves few slots besides its own share
(`moves`). A member's slots, adjacent ones merged, are its ranges (`ranges_of`), and its
selector is their OR (`selector`): at most ``⌈S/N⌉`` ranges, a few kilobytes at worst.
More members than slots: the last ones (sorted by name) get none.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = [
    "FIELD_NAMESPACE",
    "FIELD_UID",
    "HASH_SPACE",
    "SLOTS",
    "SLOTS_ANNOTATION",
    "Move",
    "ShardRange",
    "assign",
    "decode_slots",
    "encode_slots",
    "fnv1a_64",
    "moves",
    "owner",
    "ranges_of",
    "selector",
    "uid_hash",
]

HASH_SPACE = 1 << 64
"""The exclusive upper bound of the hash space, 2⁶⁴."""
SLOTS = 64
"""Equal slots the space is cut into; the unit a member gains or loses."""
FIELD_UID = "object.metadata.uid"
FIELD_NAMESPACE = "object.metadata.namespace"
_FIELDS = (FIELD_UID, FIELD_NAMESPACE)

_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3
_MASK = HASH_SPACE - 1


def fnv1a_64(data: bytes) -> int:
    """The 64-bit FNV-1a hash of `data` (Go's ``hash/fnv.New64a``)."""
    h = _FNV_OFFSET
    for byte in data:
        h = ((h ^ byte) * _FNV_PRIME) & _MASK
    return h


def uid_hash(uid: str) -> int:
    """The hash the API server computes for ``shardRange(object.metadata.uid, ...)``."""
    return fnv1a_64(uid.encode())


def _hex(value: int) -> str:
    return "0x10000000000000000" if value == HASH_SPACE else f"0x{value:016x}"


@dataclass(frozen=True, order=True)
class ShardRange:
    """``[start, end)`` of the 64-bit hash space."""

    start: int
    end: int

    def __post_init__(self) -> None:
        if not (isinstance(self.start, int) and isinstance(self.end, int)
                and 0 <= self.start < self.end <= HASH_SPACE):
            raise ValueError(f"a shard range needs 0 <= start < end <= 2**64, not "
                             f"[{self.start!r}, {self.end!r})")

    def __contains__(self, hash_: int) -> bool:
        return self.start <= hash_ < self.end

    def expression(self, field: str = FIELD_UID) -> str:
        """``shardRange(<field>, '0x<start>', '0x<end>')``, as the API server parses it."""
        if field not in _FIELDS:
            raise ValueError(f"shard field {field!r} is not one the API server hashes: "
                             f"{' or '.join(_FIELDS)}")
        return f"shardRange({field}, '{_hex(self.start)}', '{_hex(self.end)}')"


def slot_range(slot: int, slots: int = SLOTS) -> ShardRange:
    """Slot `slot` of `slots` as a range; the last one ends at 2⁶⁴."""
    if not 0 <= slot < slots:
        raise ValueError(f"slot {slot} is not in 0..{slots - 1}")
    return ShardRange(slot * HASH_SPACE // slots, (slot + 1) * HASH_SPACE // slots)


def slot_of(hash_: int, slots: int = SLOTS) -> int:
    """The slot holding `hash_`."""
    return hash_ * slots // HASH_SPACE


def ranges_of(held: Iterable[int], slots: int = SLOTS) -> tuple[ShardRange, ...]:
    """The slots in `held` as ranges, sorted, adjacent ones merged."""
    merged: list[ShardRange] = []
    for slot in sorted(set(held)):
        r = slot_range(slot, slots)
        if merged and merged[-1].end == r.start:
            merged[-1] = ShardRange(merged[-1].start, r.end)
        else:
            merged.append(r)
    return tuple(merged)


def selector(ranges: Iterable[ShardRange], field: str = FIELD_UID) -> str:
    """The ``shardSelector`` for `ranges` (their OR); `ValueError` for none: an empty
    selector would mean every object, the opposite of holding nothing."""
    parts = [r.expression(field) for r in sorted(ranges)]
    if not parts:
        raise ValueError("no ranges: a member that holds nothing must not list or watch "
                         "(an empty shard selector selects every object)")
    return " || ".join(parts)


def _rank(member: str, slot: int) -> bytes:
    return hashlib.sha1(f"{member}#{slot}".encode()).digest()


def assign(members: Iterable[str], slots: int = SLOTS) -> dict[str, frozenset[int]]:
    """Each member's slots: every slot held by exactly one member, each member ``⌊S/N⌋``
    or ``⌈S/N⌉`` of them (more members than slots: the last ones by name get none).
    Pure and deterministic: the same members give the same answer on every replica."""
    if slots < 1:
        raise ValueError(f"slots must be at least 1, not {slots}")
    names = sorted(set(members))
    if not names:
        return {}
    active = names[:slots]
    base, extra = divmod(slots, len(active))
    cap = base + (1 if extra else 0)
    full_caps = extra if extra else len(active)  # how many members may reach `cap`
    held: dict[str, set[int]] = {m: set() for m in names}
    at_cap = 0
    for slot in range(slots):
        for member in sorted(active, key=lambda m: _rank(m, slot), reverse=True):
            limit = cap if at_cap < full_caps else base
            if len(held[member]) < limit:
                held[member].add(slot)
                if len(held[member]) == cap:
                    at_cap += 1
                break
    return {m: frozenset(s) for m, s in held.items()}


def owner(assignment: Mapping[str, frozenset[int]], hash_: int,
          slots: int = SLOTS) -> str | None:
    """The member whose slots hold `hash_` (None: nobody holds its slot)."""
    slot = slot_of(hash_, slots)
    for member, held in assignment.items():
        if slot in held:
            return member
    return None


@dataclass(frozen=True)
class Move:
    """What one member gains and loses between two assignments."""

    gains: frozenset[int]
    loses: frozenset[int]


def moves(before: Mapping[str, frozenset[int]],
          after: Mapping[str, frozenset[int]]) -> dict[str, Move]:
    """Each member's change from `before` to `after` (members without one are left out).
    A member absent from `after` loses all it held; one absent from `before` gains all.
    The losing side must release a slot before the gaining side starts it."""
    out: dict[str, Move] = {}
    for member in sorted(set(before) | set(after)):
        old = before.get(member, frozenset())
        new = after.get(member, frozenset())
        if old != new:
            out[member] = Move(frozenset(new - old), frozenset(old - new))
    return out


# -- what a member publishes ---------------------------------------------------------------

SLOTS_ANNOTATION = "shard.operator-kit.io/slots"
"""On a member's Lease (server mode): the slots it serves or is about to serve, as
`encode_slots` writes them. Others start a slot only when no live member claims it."""


def encode_slots(held: Iterable[int], slots: int = SLOTS) -> str:
    """`held` as a bit mask in hex, slot 0 the lowest bit (16 digits for 64 slots)."""
    mask = 0
    for slot in held:
        if not 0 <= slot < slots:
            raise ValueError(f"slot {slot} is not in 0..{slots - 1}")
        mask |= 1 << slot
    return f"{mask:0{(slots + 3) // 4}x}"


def decode_slots(text: object, slots: int = SLOTS) -> frozenset[int] | None:
    """The slots in an annotation `encode_slots` wrote; None when it is not one (anything
    else another party wrote: not trusted, the caller says what it does instead)."""
    digits = (slots + 3) // 4
    if not isinstance(text, str) or len(text) != digits or any(
            c not in "0123456789abcdef" for c in text):
        return None
    mask = int(text, 16)
    if mask >> slots:
        return None
    return frozenset(i for i in range(slots) if mask >> i & 1)
