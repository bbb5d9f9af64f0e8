"""The embedded servers of one ``memjobs up``: Redis and PostgreSQL, each
started when no URL is configured for it, started again when it dies, and
stopped last (PostgreSQL, then Redis, which flushes its append-only file)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from memjobs_client.errors import MemjobsError
from memjobs_worker.embedded.postgres import EmbeddedPostgres
from memjobs_worker.embedded.redis import EmbeddedRedis
from memjobs_worker.settings import DatabaseSettings, RedisSettings

log = logging.getLogger(__name__)


@dataclass
class _Watched:
    """One server under watch: what tells it died, what starts it again on its
    port (returning its URL), and how often that was needed."""

    name: str  # in the log and the notices: "embedded {name} exited; ..."
    alive: Callable[[], bool]
    revive: Callable[[], str]
    url: str
    restarts: int = 0
    restarted_at: float | None = None  # when the last restart ended (epoch seconds)


class EmbeddedServers:
    """Start, watch and stop the embedded Redis and PostgreSQL.

    ``say`` is told, for the terminal, of each death and what came of the
    restart; ``restarted`` is called after each restart that succeeded (the
    stack rewrites its state file).
    """

    def __init__(self, *, say: Callable[[str], None], restarted: Callable[[], None]) -> None:
        self.redis: EmbeddedRedis | None = None
        self.postgres: EmbeddedPostgres | None = None
        self._say = say
        self._restarted = restarted
        self._watched: dict[str, _Watched] = {}

    def start(self, data_dir: Path, redis: RedisSettings, database: DatabaseSettings) -> tuple[str, str]:
        """Start Redis, then PostgreSQL, each unless its URL is configured, in
        ``data_dir``; return the Redis URL and the database URL. What started
        is stopped by :meth:`stop`, also after a failed start."""
        redis_url = redis.url
        if redis_url is None:
            self.redis = EmbeddedRedis(data_dir / "redis", appendfsync=redis.appendfsync)
            redis_url = self.redis.start()
        database_url = database.url
        if database_url is None:
            self.postgres = EmbeddedPostgres(data_dir / "postgres")
            database_url = self.postgres.start()
        if self.postgres is not None:
            self._watched["PostgreSQL"] = _Watched(
                "PostgreSQL", self.postgres.alive, self.postgres.restart, database_url
            )
        if self.redis is not None:
            # From its append-only file (fsynced on every write by default, so
            # no acknowledged job is lost).
            self._watched["Redis"] = _Watched("Redis", self.redis.alive, self.redis.start, redis_url)
        return redis_url, database_url

    def restarts(self, name: str) -> tuple[int, float | None]:
        """How often the server ``name`` ("Redis", "PostgreSQL") was restarted
        after it died, and when the last restart ended (epoch seconds)."""
        watched = self._watched.get(name)
        return (watched.restarts, watched.restarted_at) if watched is not None else (0, None)

    def revive_dead(self, stopping: Callable[[], bool]) -> None:
        """Start again each server that died (kill -9, the OOM killer), unless
        ``stopping`` says the stack stops. The workers keep running: their jobs
        fail as an outage meanwhile and are retried (see
        :class:`memjobs_worker.jobs.OutageRetries`); workers, sweeper and API
        reconnect by themselves."""
        for watched in self._watched.values():
            if stopping():
                return
            if not watched.alive():
                self._revive(watched)

    def _revive(self, watched: _Watched) -> None:
        """Start one dead server again on its port; say so in the log and on the
        terminal. A failed start is tried again at the next look."""
        name = watched.name
        watched.restarts += 1
        log.warning(f"embedded {name} exited; restarting", extra={"restarts": watched.restarts})
        started = time.monotonic()
        try:
            url = watched.revive()
        except (MemjobsError, TimeoutError) as exc:
            reason = {"reason": exc.reason} if isinstance(exc, MemjobsError) else {}
            log.error(f"embedded {name} did not restart; trying again", extra={**reason, "detail": str(exc)})
            self._say(f"embedded {name} exited and did not restart yet: {exc}")
            return
        took_s = round(time.monotonic() - started, 1)
        watched.restarted_at = time.time()
        if url != watched.url:
            log.error(f"embedded {name} came back on another port: restart memjobs up", extra={"took_s": took_s})
        log.warning(f"embedded {name} restarted", extra={"restarts": watched.restarts, "took_s": took_s})
        self._say(f"embedded {name} exited unexpectedly and was restarted in {took_s} s (restart {watched.restarts})")
        self._restarted()

    def stop(self) -> list[str]:
        """Stop PostgreSQL, then Redis; returns what could not be stopped."""
        problems: list[str] = []
        for name, server in (("PostgreSQL", self.postgres), ("Redis", self.redis)):
            if server is None:
                continue
            try:
                server.stop()
            except (MemjobsError, OSError) as exc:
                problems.append(f"{name} did not stop: {exc}")
        return problems
