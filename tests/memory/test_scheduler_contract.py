"""The extraction scheduler's contract, run against the Redis scheduler and its
in-memory twin alike: the debounce flag and its time to live, force, defer,
clear, the leases the sweep skips, and a backend that does not answer.

Each test is written once, in :class:`SchedulerContract`; :class:`TestTwin` runs
it with no server, :class:`TestRedis` on the test session's Redis. How a burst
of sources shares one message through the pipeline: ``test_scheduler.py``.
"""

from __future__ import annotations

from typing import Any

import pytest

from memjobs_client.contracts import ACTOR_EXTRACT, RememberSource, owner_key, source_id_for
from memjobs_client.errors import BackendUnavailable
from memjobs_client.redis_seam import as_str
from memjobs_worker.memory.intake import ExtractionScheduler, sweep
from memjobs_worker.memory.store import InMemoryStateStore
from tests.support.coordination import KEY, Coordination, OnRedis, OnRedisBackend, OnTwinBackend

LEASE_MS = 30_000
DELAY_MS = 500
#: max(lease, four delays): how long a debounce flag lives.
FLAG_TTL_MS = LEASE_MS
#: Redis's own clock runs on while a test runs: what must still be set is
#: looked at this far from its end.
MARGIN_MS = 100


class Sent(list[tuple[str, dict[str, Any], int | None]]):
    def __call__(self, actor: str, payload: dict[str, Any], delay_ms: int | None) -> None:
        self.append((actor, payload, delay_ms))


def scheduler(co: Coordination, sent: Sent, *, delay_ms: int = DELAY_MS) -> ExtractionScheduler:
    return co.scheduler(sent, lease_ms=LEASE_MS, delay_ms=delay_ms)


def assert_flag_lapses_after(co: Coordination, s: ExtractionScheduler, ms: int) -> None:
    """The owner's flag, as it stands now, is still set just before ``ms`` from now and gone at ``ms``."""
    co.advance(ms - MARGIN_MS)
    assert s.is_scheduled(KEY)
    co.advance(MARGIN_MS)
    assert not s.is_scheduled(KEY)


class SchedulerContract:
    """What every scheduler backend does; ``co`` is the backend under test."""

    def test_schedule_sets_the_flag_and_sends_one_delayed_message(self, co: Coordination) -> None:
        sent = Sent()
        s = scheduler(co, sent)
        assert s.schedule(KEY, "remember")
        assert s.is_scheduled(KEY)
        assert sent == [(ACTOR_EXTRACT, {"schema_version": 1, "owner_key": KEY, "trigger": "remember"}, DELAY_MS)]

    def test_a_set_flag_sends_nothing_more(self, co: Coordination) -> None:
        sent = Sent()
        s = scheduler(co, sent)
        s.schedule(KEY, "remember")
        co.advance(DELAY_MS)  # past the half delay: the flag is asked
        assert not s.schedule(KEY, "remember")
        assert not scheduler(co, sent).schedule(KEY, "sweep")  # another host's scheduler too
        assert len(sent) == 1

    def test_the_flag_expires_by_itself(self, co: Coordination) -> None:
        sent = Sent()
        s = scheduler(co, sent)
        s.schedule(KEY, "remember")
        assert_flag_lapses_after(co, s, FLAG_TTL_MS)
        assert s.schedule(KEY, "remember") and len(sent) == 2

    def test_the_flag_outlives_four_long_delays(self, co: Coordination) -> None:
        sent = Sent()
        s = scheduler(co, sent, delay_ms=10_000)
        s.schedule(KEY, "remember")
        assert_flag_lapses_after(co, s, 40_000)

    def test_force_sends_even_when_scheduled(self, co: Coordination) -> None:
        sent = Sent()
        s = scheduler(co, sent)
        s.schedule(KEY, "remember")
        assert s.schedule(KEY, "forget", force=True)
        assert [p["trigger"] for _, p, _ in sent] == ["remember", "forget"]
        assert s.is_scheduled(KEY)

    def test_clear_lets_the_next_source_schedule(self, co: Coordination) -> None:
        sent = Sent()
        s = scheduler(co, sent)
        s.schedule(KEY, "remember")
        s.clear(KEY)
        assert not s.is_scheduled(KEY)
        co.advance(DELAY_MS // 2)
        assert s.schedule(KEY, "remember") and len(sent) == 2

    def test_defer_keeps_the_flag_for_four_of_its_delays(self, co: Coordination) -> None:
        sent = Sent()
        s = scheduler(co, sent)
        s.schedule(KEY, "remember")
        assert s.defer(KEY, 20_000)
        assert sent[-1] == (ACTOR_EXTRACT, {"schema_version": 1, "owner_key": KEY, "trigger": "remember"}, 20_000)
        assert_flag_lapses_after(co, s, 80_000)

    def test_defer_sets_the_flag_when_it_was_gone(self, co: Coordination) -> None:
        sent = Sent()
        s = scheduler(co, sent)
        assert s.defer(KEY, 100)
        assert s.is_scheduled(KEY) and [d for _, _, d in sent] == [100]

    def test_without_a_delay_messages_go_at_once_and_every_source_asks(self, co: Coordination) -> None:
        sent = Sent()
        s = scheduler(co, sent, delay_ms=0)
        s.schedule(KEY, "remember")
        s.clear(KEY)
        assert s.schedule(KEY, "remember")
        assert [d for _, _, d in sent] == [None, None]

    def test_leases_held_sees_the_learning_leases_only(self, co: Coordination) -> None:
        s = scheduler(co, Sent())
        other, reindexed = owner_key("other@example.com"), owner_key("reindexed@example.com")
        assert co.lease(lease_ms=LEASE_MS).try_acquire() is not None
        assert co.lease(lease_ms=LEASE_MS, name="reindex", owner=reindexed).try_acquire() is not None
        assert s.leases_held([KEY, other, reindexed]) == [True, False, False]
        co.advance(LEASE_MS)
        assert s.leases_held([KEY]) == [False]
        assert s.leases_held([]) == []

    def test_a_source_while_the_lease_is_held_marks_the_holder_dirty_and_sends_nothing(self, co: Coordination) -> None:
        sent = Sent()
        s = scheduler(co, sent)
        holder = co.lease(lease_ms=LEASE_MS)
        assert holder.try_acquire() is not None
        assert not s.schedule(KEY, "remember") and not s.schedule(KEY, "sweep")
        assert sent == [] and not s.is_scheduled(KEY)
        assert holder.release() == "again"  # the holder reads the ledger once more
        assert holder.release() != "again"  # then lets go
        assert s.schedule(KEY, "remember") and len(sent) == 1

    def test_many_owners_scheduled_together_are_each_claimed_once(self, co: Coordination) -> None:
        # A group of remembers: one owner held (marked dirty), one flagged
        # already, two new (one of them twice in the group): one message each
        # for the new, in the group's order.
        sent = Sent()
        s = scheduler(co, sent)
        held, flagged, new, other = (owner_key(f"{n}@example.com") for n in ("held", "flagged", "new", "other"))
        holder = co.lease(lease_ms=LEASE_MS, owner=held)
        assert holder.try_acquire() is not None
        assert s.schedule(flagged, "remember")
        co.advance(DELAY_MS)  # past its message's first half: looked at again
        assert s.schedule_many([held, new, flagged, new, other], "remember") == 2
        assert [(p["owner_key"], delay) for _, p, delay in sent[1:]] == [(new, DELAY_MS), (other, DELAY_MS)]
        assert [s.is_scheduled(o) for o in (held, flagged, new, other)] == [False, True, True, True]
        assert holder.release() == "again"
        assert s.schedule_many([], "remember") == 0

    def test_a_failed_run_held_for_its_retry_keeps_others_from_sending(self, co: Coordination) -> None:
        sent = Sent()
        s = scheduler(co, sent)
        s.hold(KEY)
        co.advance(FLAG_TTL_MS - MARGIN_MS)
        assert not s.schedule(KEY, "remember") and not s.schedule(KEY, "sweep") and sent == []

    def test_the_sweep_skips_held_leases_and_scheduled_owners(self, co: Coordination) -> None:
        sent = Sent()
        s = scheduler(co, sent)
        store = InMemoryStateStore(clock=co.clock)
        held, scheduled, idle = (owner_key(f"{n}@example.com") for n in ("held", "scheduled", "idle"))
        for key in (held, scheduled, idle):
            store.add_source(
                RememberSource(owner_key=key, source_id=source_id_for(key, "a note"), text="a note"),
                sent_at=co.clock.now,
            )
        assert co.lease(lease_ms=LEASE_MS, owner=held).try_acquire() is not None
        assert s.schedule(scheduled, "remember")
        co.advance(1000)
        assert sweep(store, s, co.clock.now, 500) == 1
        assert [(p["owner_key"], p["trigger"]) for _, p, _ in sent[1:]] == [(idle, "sweep")]
        assert sweep(store, s, co.clock.now, 500) == 0  # idle is scheduled now

    def test_a_backend_that_does_not_answer(self, co: Coordination) -> None:
        sent = Sent()
        s = scheduler(co, sent)
        co.cut_off()
        with pytest.raises(BackendUnavailable):
            s.schedule(KEY, "remember")
        assert not s.defer(KEY, 100)  # the caller runs now instead
        for ask in (s.is_scheduled, s.clear):
            with pytest.raises(BackendUnavailable):
                ask(KEY)
        with pytest.raises(BackendUnavailable):
            s.leases_held([KEY])
        with pytest.raises(BackendUnavailable):
            s.schedule_many([KEY, owner_key("other@example.com")], "remember")
        assert sent == []
        co.reconnect()
        assert s.schedule(KEY, "remember") and len(sent) == 1


class TestTwin(OnTwinBackend, SchedulerContract):
    pass


class TestRedis(OnRedisBackend, SchedulerContract):
    def test_a_redis_that_lost_the_claim_script_is_given_it_and_each_claim_runs_once(self, co: Coordination) -> None:
        # Redis restarted or flushed its scripts: the group's claims are sent
        # again with the script loaded, none twice (a second claim of a flag
        # just set would answer "already scheduled" and send nothing).
        assert isinstance(co, OnRedis)
        sent = Sent()
        s = scheduler(co, sent)
        co.admin.script_flush()
        owners = [owner_key(f"{n}@example.com") for n in range(3)]
        assert s.schedule_many(owners, "remember") == 3
        assert [p["owner_key"] for _, p, _ in sent] == owners

    def test_a_send_that_fails_clears_the_flags_of_the_owners_not_sent(self, co: Coordination) -> None:
        sent: list[str] = []

        def enqueue(actor: str, payload: dict[str, Any], delay_ms: int | None) -> None:
            if len(sent) == 1:
                raise BackendUnavailable("Redis did not answer")
            sent.append(payload["owner_key"])

        s = co.scheduler(enqueue, lease_ms=LEASE_MS, delay_ms=DELAY_MS)
        owners = [owner_key(f"{n}@example.com") for n in range(3)]
        with pytest.raises(BackendUnavailable):
            s.schedule_many(owners, "remember")
        # The first went out; the second's and the third's flags are gone, so
        # the job's retry (or the sweep) sends theirs.
        assert sent == owners[:1]
        assert [s.is_scheduled(o) for o in owners] == [True, False, False]

    def test_after_a_failover_a_flag_set_before_it_is_sent_again_once(self, co: Coordination) -> None:
        # Redis replicates asynchronously: a flag may survive a failover that
        # lost the message it announced. The sweep sends that owner's
        # extraction again, once; a flag set under the current master it trusts.
        assert isinstance(co, OnRedis)
        sent = Sent()
        s = scheduler(co, sent)
        store = InMemoryStateStore(clock=co.clock)
        store.add_source(
            RememberSource(owner_key=KEY, source_id=source_id_for(KEY, "a note"), text="a note"), sent_at=co.clock.now
        )
        assert s.schedule(KEY, "remember")
        co.advance(1000)
        assert sweep(store, s, co.clock.now, 500) == 0  # set under this master: trusted
        # The flag was set under another master, as one that reached the
        # replica promoted since (its message did not).
        flag = s.flag(KEY)
        set_at = as_str(co.admin.get(flag)).rpartition(":")[2]
        co.admin.set(flag, f"an-earlier-master:{set_at}", keepttl=True)
        assert sweep(store, s, co.clock.now, 500) == 1
        assert [(p["owner_key"], p["trigger"]) for _, p, _ in sent[1:]] == [(KEY, "sweep")]
        assert s.is_scheduled(KEY) and as_str(co.admin.get(flag)).startswith(s.history(fresh=True) + ":")
        assert sweep(store, s, co.clock.now, 500) == 0  # the flag set afresh is trusted
        assert len(sent) == 2
