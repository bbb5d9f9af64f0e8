"""The lease contract, run against the Redis lease and its in-memory twin alike:
fencing tokens and their floor, one holder at a time, the dirty flag and the
release outcomes, expiry and renewal, abandon, and a holder cut off from its
backend.

Each test is written once, in :class:`LeaseContract`; :class:`TestTwin` runs it
with no server, :class:`TestRedis` on the test session's Redis. Time is moved
(:meth:`~tests.support.coordination.Coordination.advance`), never slept through.
"""

from __future__ import annotations

from typing import Any

import pytest

from memjobs_client.errors import BackendUnavailable, LockLost
from tests.support.coordination import KEY, Coordination, OnRedisBackend, OnTwinBackend

LEASE_MS = 5000
#: Redis's own clock runs on while a test runs: what must still be held is
#: looked at this far from the end of its lease (a second: a loaded machine
#: stalls a test for more than the 100 ms this once was, and failed it).
MARGIN_MS = 1000


def nothing_sent(actor: str, payload: dict[str, Any], delay_ms: int | None) -> None:
    return None


class LeaseContract:
    """What every lease backend does; ``co`` is the backend under test."""

    def test_fencing_tokens_increase_with_each_acquisition(self, co: Coordination) -> None:
        first = co.lease(lease_ms=LEASE_MS)
        token1 = first.try_acquire()
        assert first.release() == "released"
        second = co.lease(lease_ms=LEASE_MS)
        token2 = second.try_acquire()
        assert token1 is not None and token2 is not None and token2 > token1
        assert (first.token, second.token) == (token1, token2)

    def test_a_token_is_above_the_floor_and_a_lower_floor_never_lowers_it(self, co: Coordination) -> None:
        first = co.lease(lease_ms=LEASE_MS)
        assert first.try_acquire(floor=10_000) == 10_001  # the counter was behind the ledger
        assert first.release() == "released"
        second = co.lease(lease_ms=LEASE_MS)
        assert second.try_acquire(floor=0) == 10_002

    def test_a_held_lease_grants_nothing_whatever_the_floor(self, co: Coordination) -> None:
        holder, other = co.lease(lease_ms=LEASE_MS), co.lease(lease_ms=LEASE_MS)
        assert holder.try_acquire() == 1
        assert other.try_acquire(floor=50_000) is None
        assert other.token is None
        assert holder.release() == "again"  # (the busy try marked the owner dirty)
        assert holder.release() == "released"
        assert co.lease(lease_ms=LEASE_MS).try_acquire() == 2

    def test_leases_of_other_owners_and_names_are_independent(self, co: Coordination) -> None:
        learn = co.lease(lease_ms=LEASE_MS)
        assert learn.try_acquire() is not None
        assert co.lease(lease_ms=LEASE_MS, name="reindex").try_acquire() == 1
        assert co.lease(lease_ms=LEASE_MS, owner="f" * 64).try_acquire() == 1

    def test_second_holder_fails_fast_and_the_holder_loops_again(self, co: Coordination) -> None:
        events: list[str] = []
        holder, other = co.lease(lease_ms=LEASE_MS, events=events), co.lease(lease_ms=LEASE_MS, events=events)
        assert holder.try_acquire() is not None
        assert other.try_acquire() is None
        assert events == ["acquired", "busy"]
        assert holder.release() == "again"  # the wake-up is not lost ...
        assert co.lease(lease_ms=LEASE_MS).try_acquire() is None  # ... and the lease still held
        assert holder.release() == "again"  # (that try marked it dirty once more)
        assert holder.release() == "released"
        assert events == ["acquired", "busy", "released"]
        assert co.lease(lease_ms=LEASE_MS).try_acquire() is not None

    def test_again_extends_the_lease_by_a_whole_lease(self, co: Coordination) -> None:
        holder = co.lease(lease_ms=LEASE_MS)
        holder.try_acquire()
        co.lease(lease_ms=LEASE_MS).try_acquire()
        co.advance(LEASE_MS - MARGIN_MS)
        assert holder.release() == "again"
        co.advance(LEASE_MS - MARGIN_MS)
        assert co.lease(lease_ms=LEASE_MS).try_acquire() is None  # still the holder's
        assert holder.release() == "again"
        assert holder.release() == "released"

    def test_the_dirty_flag_lasts_four_leases(self, co: Coordination) -> None:
        holder = co.lease(lease_ms=LEASE_MS)
        holder.try_acquire()
        assert co.lease(lease_ms=LEASE_MS).try_acquire() is None  # dirty from here
        for _ in range(7):  # three and a half leases, the holder renewing
            co.advance(LEASE_MS // 2)
            assert holder.renew()
        assert holder.release() == "again"
        holder.renew()
        co.lease(lease_ms=LEASE_MS).try_acquire()  # dirty again
        for _ in range(9):  # four leases and a half
            co.advance(LEASE_MS // 2)
            assert holder.renew()
        assert holder.release() == "released"  # the flag had expired

    def test_an_unrenewed_lease_expires_and_the_next_holder_takes_it(self, co: Coordination) -> None:
        events: list[str] = []
        holder = co.lease(lease_ms=LEASE_MS, events=events)
        holder.try_acquire()
        co.advance(LEASE_MS - MARGIN_MS)
        assert not holder.expired()
        assert co.lease(lease_ms=LEASE_MS).try_acquire() is None
        holder.release()  # "again": the busy try above; the lease extended from now
        co.advance(LEASE_MS)
        assert holder.expired()
        usurper = co.lease(lease_ms=LEASE_MS)
        assert usurper.try_acquire() is not None
        assert not holder.renew()
        assert holder.lost.is_set() and not holder.unreachable
        with pytest.raises(LockLost):
            holder.ensure_held()
        assert holder.release() == "lost"
        assert events.count("lost") == 2  # once at the renewal, once at the release
        assert usurper.release() == "released"  # untouched by the old holder

    def test_renewing_keeps_the_lease_past_its_first_term(self, co: Coordination) -> None:
        events: list[str] = []
        holder = co.lease(lease_ms=LEASE_MS, events=events)
        holder.try_acquire()
        for _ in range(4):
            co.advance(LEASE_MS - MARGIN_MS)
            assert holder.renew()
            assert not holder.expired()
        holder.ensure_held()
        assert co.lease(lease_ms=LEASE_MS).try_acquire() is None
        assert events == ["acquired", "renewed", "renewed", "renewed", "renewed", "renewed"]

    def test_expired_counts_from_the_last_confirmed_renewal(self, co: Coordination) -> None:
        holder = co.lease(lease_ms=LEASE_MS)
        holder.try_acquire()
        co.advance(LEASE_MS // 2)
        holder.renew()
        co.advance(LEASE_MS - 1)
        assert not holder.expired()
        co.advance(1)
        assert holder.expired()

    def test_abandon_deletes_the_lease_whatever_the_dirty_flag(self, co: Coordination) -> None:
        holder = co.lease(lease_ms=LEASE_MS)
        holder.try_acquire()
        assert co.lease(lease_ms=LEASE_MS).try_acquire() is None
        holder.abandon()
        assert co.lease(lease_ms=LEASE_MS).try_acquire() is not None

    def test_abandon_leaves_a_newer_holders_lease_alone(self, co: Coordination) -> None:
        holder = co.lease(lease_ms=LEASE_MS)
        holder.try_acquire()
        co.advance(LEASE_MS)
        newer = co.lease(lease_ms=LEASE_MS)
        assert newer.try_acquire() is not None
        holder.abandon()
        assert co.lease(lease_ms=LEASE_MS).try_acquire() is None
        assert newer.release() == "again"

    def test_acquire_deletes_the_key_it_is_told_to_clear_whatever_the_outcome(
        self,
        co: Coordination,
    ) -> None:
        scheduler = co.scheduler(nothing_sent, lease_ms=LEASE_MS, delay_ms=0)
        holder = co.lease(lease_ms=LEASE_MS)
        assert scheduler.schedule(KEY, "remember") and scheduler.is_scheduled(KEY)
        assert holder.try_acquire(clear=scheduler.flag(KEY)) is not None
        assert not scheduler.is_scheduled(KEY)
        # (forced: while the lease is held, a remember marks the holder dirty instead)
        assert scheduler.schedule(KEY, "forget", force=True) and scheduler.is_scheduled(KEY)
        assert co.lease(lease_ms=LEASE_MS).try_acquire(clear=scheduler.flag(KEY)) is None
        assert not scheduler.is_scheduled(KEY)

    def test_a_holder_cut_off_commits_on_the_fence_but_starts_nothing_after_a_lease(
        self,
        co: Coordination,
    ) -> None:
        events: list[str] = []
        holder = co.lease(lease_ms=LEASE_MS, events=events)
        assert holder.try_acquire() is not None
        co.cut_off()
        holder.ensure_held()  # cannot tell: the fence in the ledger decides the commit
        assert holder.unreachable and events[-1] == "unverified"
        assert not holder.renew() and not holder.expired()
        co.advance(LEASE_MS)  # a whole lease without a confirmed renewal
        assert holder.expired()
        assert not holder.lost.is_set()  # not known lost: only no longer to be used
        holder.abandon()  # best effort: says nothing
        with pytest.raises(BackendUnavailable):
            holder.release()
        with pytest.raises(BackendUnavailable):
            co.lease(lease_ms=LEASE_MS).try_acquire()

    def test_a_holder_back_from_a_partition_learns_it_lost_the_lease(self, co: Coordination) -> None:
        holder = co.lease(lease_ms=LEASE_MS)
        holder.try_acquire()
        co.cut_off()
        co.advance(LEASE_MS)
        co.reconnect()
        newer = co.lease(lease_ms=LEASE_MS)
        assert newer.try_acquire() is not None
        assert not holder.renew() and holder.lost.is_set() and not holder.unreachable
        assert holder.release() == "lost"


class TestTwin(OnTwinBackend, LeaseContract):
    pass


class TestRedis(OnRedisBackend, LeaseContract):
    pass
