"""Shard ranges for server-side sharding: the hash, the split among members, the selector
string and the moves (operator_kit.election.shard_ranges). The cluster test
tests/cluster/test_shard_ranges.py checks the same against a real API server."""

from __future__ import annotations

import random

import pytest

from operator_kit.election.shard_ranges import (
    HASH_SPACE,
    SLOTS,
    ShardRange,
    assign,
    decode_slots,
    encode_slots,
    fnv1a_64,
    moves,
    owner,
    ranges_of,
    selector,
    slot_range,
    uid_hash,
)


def test_the_hash_is_go_s_fnv1a_64() -> None:
    # Go's hash/fnv test vectors for New64a.
    assert fnv1a_64(b"") == 0xCBF29CE484222325
    assert fnv1a_64(b"a") == 0xAF63DC4C8601EC8C
    assert fnv1a_64(b"ab") == 0x089C4407B545986A
    assert fnv1a_64(b"abc") == 0xE71FA2190541574B
    # A uid the 1.37.2 API server put in shardRange(uid, 0x0, 0x8000000000000000).
    assert uid_hash("c5c07d7b-2b52-402d-a63c-4716b6f86cac") == 0x32C0409C56D0E8EB


@pytest.mark.parametrize("count", [1, 2, 3, 4, 7, 64])
def test_every_slot_is_held_by_exactly_one_member_in_equal_shares(count: int) -> None:
    members = [f"member-{i}" for i in range(count)]
    split = assign(members)
    held = [slot for slots in split.values() for slot in slots]
    assert sorted(held) == list(range(SLOTS))
    sizes = {len(s) for s in split.values()}
    assert sizes <= {SLOTS // count, -(-SLOTS // count)}


def test_every_hash_has_exactly_one_owner_including_the_edges() -> None:
    split = assign(["a", "b", "c"])
    ranges = {m: ranges_of(s) for m, s in split.items()}
    rng = random.Random(7)
    edges = [0, HASH_SPACE - 1, *(slot_range(i).start for i in range(SLOTS)),
             *(slot_range(i).end - 1 for i in range(SLOTS))]
    for h in edges + [rng.randrange(HASH_SPACE) for _ in range(2000)]:
        holders = [m for m, rs in ranges.items() if any(h in r for r in rs)]
        assert holders == [owner(split, h)], hex(h)


def test_the_split_depends_only_on_the_set_of_members() -> None:
    assert assign(["c", "a", "b"]) == assign(["b", "c", "a", "a"])


def test_more_members_than_slots_leaves_the_last_ones_without_slots() -> None:
    split = assign([f"m{i:03d}" for i in range(SLOTS + 2)])
    assert [m for m, s in split.items() if not s] == [f"m{SLOTS:03d}", f"m{SLOTS + 1:03d}"]


def test_a_join_moves_slots_only_to_the_newcomer_and_not_many_more_than_its_share() -> None:
    before = assign(["a", "b", "c"])
    after = assign(["a", "b", "c", "d"])
    plan = moves(before, after)
    gained = [s for m in plan.values() for s in m.gains]
    lost = [s for m in plan.values() for s in m.loses]
    assert sorted(gained) == sorted(lost)  # each moved slot has one loser and one gainer
    assert plan["d"].gains == after["d"] and not plan["d"].loses
    assert len(lost) <= SLOTS // 2  # its share is 16 of 64; bounded loads shuffle a few


def test_a_leaving_member_loses_everything_it_held() -> None:
    before = assign(["a", "b", "c"])
    after = assign(["a", "c"])
    plan = moves(before, after)
    assert plan["b"].loses == before["b"] and not plan["b"].gains
    assert sorted(s for m in plan.values() for s in m.gains) == sorted(
        s for m in plan.values() for s in m.loses)


def test_adjacent_slots_merge_and_the_last_range_ends_at_two_to_the_64() -> None:
    assert ranges_of([0, 1, 3]) == (ShardRange(0, 2 * HASH_SPACE // SLOTS),
                                    ShardRange(3 * HASH_SPACE // SLOTS, 4 * HASH_SPACE // SLOTS))
    assert selector(ranges_of(range(SLOTS // 2, SLOTS))) == (
        "shardRange(object.metadata.uid, '0x8000000000000000', '0x10000000000000000')")
    assert selector([ShardRange(0, 1), ShardRange(2, 3)]) == (
        "shardRange(object.metadata.uid, '0x0000000000000000', '0x0000000000000001') || "
        "shardRange(object.metadata.uid, '0x0000000000000002', '0x0000000000000003')")


def test_a_selector_of_no_ranges_is_refused_because_empty_means_everything() -> None:
    with pytest.raises(ValueError, match="empty shard selector selects every object"):
        selector([])


@pytest.mark.parametrize("start,end", [(5, 5), (-1, 3), (0, HASH_SPACE + 1), (9, 2)])
def test_a_range_outside_the_hash_space_or_empty_is_refused(start: int, end: int) -> None:
    with pytest.raises(ValueError, match="0 <= start < end <= 2\\*\\*64"):
        ShardRange(start, end)


def test_a_field_the_server_does_not_hash_is_refused() -> None:
    with pytest.raises(ValueError, match=r"object\.metadata\.uid or object\.metadata\.namespace"):
        ShardRange(0, 1).expression("metadata.uid")


def test_published_slots_round_trip_and_anything_else_is_not_a_claim() -> None:
    held = assign(["a", "b", "c"])["b"]
    assert decode_slots(encode_slots(held)) == held
    assert encode_slots([0, 63]) == "8000000000000001"
    assert decode_slots(encode_slots([])) == frozenset()
    for forged in ("", "ffff", "x" * 16, "FFFFFFFFFFFFFFFF", "1" * 17, None, 12,
                   "0x00000000000001"):
        assert decode_slots(forged) is None, forged
