"""PostgreSQL killed (kill -9 of the postmaster) while a backlog is being learned
and producers keep sending (issue 26, item 1).

- An external PostgreSQL (the workers were given its URL and do not own it):
  jobs fail as an outage and are retried on a time budget, not a count (the
  tests set ``max_retries=1``: counted, they would be dead-lettered after two
  failures); readiness (``/readyz``, ``memjobs check``) says the database is
  unreachable while it is; once it answers again every source is learned
  exactly once, one memory each, within 60 s, and nothing is dead-lettered.
- The embedded stack (``memjobs up``): the supervisor restarts its PostgreSQL
  on the same port and says so (terminal, worker log, state file, ``memjobs
  status``), and the backlog is learned as above; then its Redis, likewise.

Synchronisation is by events: the killed postmaster's exit, the in-process
worker's job log, and polling with a deadline on the state of other processes
(the ledger, the stack's state file).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from memjobs_client import MemjobsClient
from memjobs_client.contracts import owner_key
from memjobs_worker.cli import exits
from memjobs_worker.db import create_db_engine, migrate
from memjobs_worker.embedded import EmbeddedPostgres
from memjobs_worker.embedded.process import pid_alive
from memjobs_worker.memory.store.schema import attempts
from memjobs_worker.settings import Settings
from tests.support.cli import Up, cli_env, run_cli, scratch_dir
from tests.support.harness import Harness
from tests.support.http import Api
from tests.support.joblog import JobLog
from tests.support.openai_server import FakeOpenAI
from tests.support.polling import wait_for
from tests.support.settings import build as build_settings

pytestmark = pytest.mark.fault

OWNERS = [f"pg-outage-{i}@example.com" for i in range(3)]


def fake_embeddings(model: FakeOpenAI) -> dict[str, Any]:
    """Embeddings from the scripted server (no light model: each source is stored
    verbatim, one memory per source)."""
    return {"embedding_base_url": model.base_url, "embedding_api_key": "k", "embedding_dims": 64}


@pytest.fixture
def own_pg() -> Iterator[EmbeddedPostgres]:
    """A PostgreSQL of this test's own, migrated, to kill (not the session's)."""
    directory = Path(tempfile.mkdtemp(prefix="memjobs-test-pgkill-"))
    server = EmbeddedPostgres(directory / "data")
    server.start()
    engine = create_db_engine(server.url, pool_size=1)
    migrate(engine)
    engine.dispose()
    yield server
    server.stop()
    shutil.rmtree(directory, ignore_errors=True)


class Producer(threading.Thread):
    """Keeps remembering texts (round-robin over the owners) until stopped."""

    def __init__(self, client: MemjobsClient, prefix: str) -> None:
        super().__init__(name=f"producer-{prefix}", daemon=True)
        self.client = client
        self.prefix = prefix
        self.sent: list[tuple[str, str, str]] = []  # (owner, text, source id)
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        i = 0
        try:
            while not self.stopping.wait(0.05):
                owner = OWNERS[i % len(OWNERS)]
                text = f"{self.prefix} fact number {i} for {owner}"
                self.sent.append((owner, text, self.client.remember(owner, text)))
                i += 1
        except BaseException as exc:  # noqa: BLE001 - reported by stop()
            self.error = exc

    def stop(self) -> list[tuple[str, str, str]]:
        self.stopping.set()
        self.join(30)
        assert self.error is None, f"a producer call failed during the outage: {self.error!r}"
        return self.sent


def not_final(h: Harness, sent: list[tuple[str, str, str]]) -> dict[str, str]:
    """The sources sent that are not final yet (missing: not in the ledger)."""
    found = {r.source_id: r.state for o in OWNERS for r in h.store.list_sources(owner_key(o))}
    return {sid: found.get(sid, "missing") for _, _, sid in sent if found.get(sid, "missing") in ("pending", "missing")}


def wait_all_final(h: Harness, sent: list[tuple[str, str, str]], timeout_s: float, what: str) -> None:
    try:
        wait_for(lambda: not not_final(h, sent), timeout_s, what)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; not final: {not_final(h, sent)}; queues: {h.queues()}") from None


def assert_learned_once_with_one_memory_each(h: Harness, sent: list[tuple[str, str, str]]) -> None:
    for owner in OWNERS:
        key = owner_key(owner)
        mine = [(text, sid) for o, text, sid in sent if o == owner]
        states = {r.source_id: r.state for r in h.store.list_sources(key)}
        assert states == {sid: "learned" for _, sid in mine}
        with h.store.engine.connect() as conn:
            rows = conn.execute(attempts.select().where(attempts.c.owner_key == key)).all()
        committed = Counter(sid for row in rows if row.state == "committed" for sid in row.source_ids)
        assert committed == Counter(sid for _, sid in mine), "a source was learned twice or never"
        memories = Counter(m.text for m in h.runtime.engine.list(key))
        assert memories == Counter(text for text, _ in mine), "not exactly one memory per source"


def no_dead_letters(h: Harness) -> None:
    dead = {q: s["dead"] for q, s in h.queues().items() if s["dead"]}
    assert not dead, f"dead-lettered during a database outage: {dead}"


def outage_retries(job_log: JobLog) -> Counter[str]:
    """How often each message failed on the outage and was retried."""
    with job_log.cond:
        return Counter(
            getattr(r, "message_id", "")
            for r in job_log.records
            if r.getMessage() == "job failed"
            and getattr(r, "reason", None) == "backend_unavailable"
            and getattr(r, "outcome", None) == "retried"
        )


@pytest.mark.slow
def test_kill_9_of_an_external_postgres_mid_backlog_loses_nothing_and_learns_each_source_once(
    make_settings: Callable[..., Settings],
    api_factory: Callable[..., Api],
    own_pg: EmbeddedPostgres,
    job_log: JobLog,
    tmp_path: Path,
    fake_model: FakeOpenAI,
    record_property: Callable[[str, object], None],
) -> None:
    # max_retries=1: were outage failures counted, a job would be dead-lettered
    # on its second. The outage budget and backoff cap are the defaults.
    settings = make_settings(database_url=own_pg.url, max_retries=1, api_port=0, **fake_embeddings(fake_model))
    api = api_factory(settings=settings)
    h = api.harness
    backlog = Producer(h.client, "before")
    backlog.sent += [
        (o, f"backlog fact {i} for {o}", h.client.remember(o, f"backlog fact {i} for {o}"))
        for i in range(10)
        for o in OWNERS
    ]
    wait_for(
        lambda: any(r.state == "learned" for o in OWNERS for r in h.store.list_sources(owner_key(o))),
        30,
        "the backlog to start being learned",
    )

    own_pg.kill()  # kill -9 of the postmaster, mid-backlog
    during = Producer(h.client, "during")
    during.start()
    try:
        # Readiness says so, in the API and the CLI, while the database is gone.
        ready = api.get("/readyz")
        assert ready.status_code == 503, ready.text
        assert ready.json()["detail"] == "the state database (PostgreSQL) is unreachable"
        env = cli_env(tmp_path / "cli", MEMJOBS_REDIS_URL=settings.redis.url or "", MEMJOBS_DATABASE_URL=own_pg.url)
        check = run_cli(env, "check")
        assert check.code == exits.FAILED, check
        assert "state database (PostgreSQL) is unreachable" in check.stderr, check
        # Jobs fail as an outage and are retried, more often than max_retries allows.
        wait_for(
            lambda: max(outage_retries(job_log).values(), default=0) >= 3,
            30,
            "a job to fail on the outage three times and still be retried",
        )
        assert not any(
            r.getMessage() == "job failed" and getattr(r, "outcome", None) == "dead_lettered" for r in job_log.records
        )
    finally:
        sent = backlog.sent + during.stop()
        if not own_pg.alive():
            own_pg.restart()
    back_at = time.monotonic()
    assert api.get("/readyz").status_code == 200
    wait_all_final(h, sent, 60, "every source final after the database returned")
    final_s = time.monotonic() - back_at
    print(
        f"PostgreSQL kill -9: {len(sent)} sources, every one final {final_s:.1f} s after it answered "
        f"again ({sum(outage_retries(job_log).values())} outage retries)"
    )
    record_property("pg_return_to_final_s", round(final_s, 1))
    assert final_s < 60
    assert_learned_once_with_one_memory_each(h, sent)
    no_dead_letters(h)


@pytest.mark.slow
def test_the_embedded_stack_restarts_its_killed_postgres_and_redis_and_says_so(
    harness_factory: Callable[[Settings], Harness],
    fake_model: FakeOpenAI,
) -> None:
    embeddings = fake_embeddings(fake_model)
    with scratch_dir("pgkill") as base:
        data_dir = base / "data"
        env = cli_env(
            data_dir,
            MEMJOBS_EXTRACT_DELAY_MS="20",
            MEMJOBS_SWEEP_INTERVAL_MS="300",
            MEM0_DIR=str(base / "mem0"),
            MEMJOBS_METRICS="off",
            MEMJOBS_MIN_BACKOFF_MS="100",
            MEMJOBS_MAX_RETRIES="1",
            MEMJOBS_FAST_WORKER_PROCESSES="0",
            MEMJOBS_KNOWLEDGE="off",
            **{f"MEMJOBS_{k.upper()}": str(v) for k, v in embeddings.items()},
        )
        up = Up(data_dir, env, base / "up.out")
        try:
            up.wait_ready()
            stack = json.loads(up.stack_file.read_text())
            h = harness_factory(
                build_settings(
                    data_dir=base / "reader",
                    redis_url=stack["redis_url"],
                    database_url=stack["database_url"],
                    **embeddings,
                )
            )
            pidfile = data_dir / "postgres" / "postmaster.pid"
            postmaster = int(pidfile.read_text().splitlines()[0])
            producer = Producer(h.client, "embedded")
            producer.sent += [
                (o, f"queued fact {i} for {o}", h.client.remember(o, f"queued fact {i} for {o}"))
                for i in range(5)
                for o in OWNERS
            ]
            os.kill(postmaster, signal.SIGKILL)
            wait_for(lambda: not pid_alive(postmaster), 10, "the postmaster's exit")
            producer.start()
            try:
                restarted = wait_for(
                    lambda: json.loads(up.stack_file.read_text()).get("postgres_restarts"),
                    60,
                    "the supervisor to restart PostgreSQL",
                )
            finally:
                sent = producer.stop()
            assert restarted == 1
            assert int(pidfile.read_text().splitlines()[0]) != postmaster
            assert json.loads(up.stack_file.read_text())["database_url"] == stack["database_url"]
            wait_for(
                lambda: "embedded PostgreSQL exited unexpectedly and was restarted" in up.text(),
                10,
                "the terminal notice",
            )
            log = (data_dir / "logs" / "worker.log").read_text()
            assert "embedded PostgreSQL exited; restarting" in log
            assert "embedded PostgreSQL restarted" in log
            wait_all_final(h, sent, 60, "every source final after the restart")
            assert_learned_once_with_one_memory_each(h, sent)
            no_dead_letters(h)
            status = run_cli(env, "status")
            assert status.code == exits.OK, status
            assert "embedded PostgreSQL: died and restarted 1 time(s)" in status.stdout

            # Its Redis too (from its append-only file, on its port).
            redis_pid = int(json.loads(up.stack_file.read_text())["redis_pid"])
            os.kill(redis_pid, signal.SIGKILL)
            wait_for(
                lambda: json.loads(up.stack_file.read_text()).get("redis_restarts") == 1,
                30,
                "the supervisor to restart Redis",
            )
            assert json.loads(up.stack_file.read_text())["redis_url"] == stack["redis_url"]
            texts = [(o, f"after the Redis restart, fact for {o}") for o in OWNERS]
            after = [(o, text, h.client.remember(o, text)) for o, text in texts]
            wait_all_final(h, sent + after, 60, "every source final after the Redis restart")
            assert_learned_once_with_one_memory_each(h, sent + after)
            assert "embedded Redis exited unexpectedly and was restarted" in up.text()
        finally:
            up.close()
