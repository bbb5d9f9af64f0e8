"""Point-in-time copies of the embedded servers, for ``memjobs backup`` and
``memjobs restore``: a PostgreSQL dump (``pg_dump``/``pg_restore`` of the
binaries the embedded server runs) and a Redis snapshot (``BGSAVE``'s RDB file).

Why these: ``pg_dump`` reads one MVCC snapshot, so the dump is consistent while
the workers write; ``BGSAVE`` forks and writes the whole keyspace as it was at
the fork, to a temporary file renamed into place when complete, so the copied
file is never half-written. A restore loads the RDB into a Redis of its own
with the append-only file off, then switches it on (Redis writes the whole
keyspace as the new append-only file's base) before the stack's Redis, which
starts from its append-only file, ever sees the directory.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis

from memjobs_client import keys
from memjobs_client.contracts import QUEUES
from memjobs_client.errors import BackendUnavailable, ConfigurationError
from memjobs_client.redis_seam import as_str, redis_best_effort, redis_errors
from memjobs_worker.embedded.postgres import find_postgres_bindir
from memjobs_worker.embedded.process import wait_until
from memjobs_worker.embedded.redis import find_redis_server

#: How long a snapshot may take (a BGSAVE, an append-only rewrite), in seconds.
SNAPSHOT_TIMEOUT_S = 600.0
#: The Redis file name a restore loads its snapshot from.
RDB_NAME = "dump.rdb"
#: Keys never carried by an archive: the console's signing keys and sessions.
CONSOLE_PATTERNS = (f"{keys.NAMESPACE}:console:*",)


# --- PostgreSQL -----------------------------------------------------------------------


def pg_dump(database_url: str, into: Path) -> None:
    """Dump the database of ``database_url`` to ``into`` (``--format=custom``).

    Raises:
        ConfigurationError: no pg_dump (the embedded server's binaries are missing).
        BackendUnavailable: pg_dump failed (the server did not answer, …).
    """
    _pg_tool("pg_dump", "--format=custom", "--no-password", f"--file={into}", f"--dbname={database_url}")


def pg_restore(database_url: str, dump: Path) -> None:
    """Restore ``dump`` into the (fresh) database of ``database_url``, in one
    transaction: all of it or nothing.

    Raises:
        BackendUnavailable: pg_restore failed.
    """
    _pg_tool(
        "pg_restore",
        "--exit-on-error",
        "--single-transaction",
        "--no-owner",
        "--no-password",
        f"--dbname={database_url}",
        str(dump),
    )


def _pg_tool(tool: str, *args: str) -> None:
    binary = find_postgres_bindir() / tool
    if not binary.exists():
        raise ConfigurationError(f"{binary} not found: the embedded PostgreSQL's binaries are incomplete")
    result = subprocess.run([str(binary), *args], capture_output=True, text=True, stdin=subprocess.DEVNULL)  # noqa: S603 - a PostgreSQL tool, our arguments
    if result.returncode != 0:
        raise BackendUnavailable(f"{tool} failed ({result.returncode}): {result.stderr.strip()[-500:]}")


# --- Redis ----------------------------------------------------------------------------


def redis_snapshot(client: redis.Redis, into: Path, timeout_s: float = SNAPSHOT_TIMEOUT_S) -> str:
    """``BGSAVE`` (scheduled after an append-only rewrite in progress), wait for
    it, and copy the RDB file it wrote to ``into``. Returns Redis's version.

    Raises:
        BackendUnavailable: Redis did not answer, or the save failed.
    """
    try:
        with redis_errors():
            before = client.info("persistence")
            client.bgsave(schedule=True)

            def saved() -> bool:
                now = client.info("persistence")
                if now.get("rdb_bgsave_in_progress") or now.get("rdb_bgsave_scheduled"):
                    return False
                newer = (
                    now.get("rdb_saves", 0) > before.get("rdb_saves", 0)
                    or now["rdb_last_save_time"] > before["rdb_last_save_time"]
                )
                if newer and now.get("rdb_last_bgsave_status") != "ok":
                    raise BackendUnavailable("Redis's BGSAVE failed: see its log")
                return bool(newer)

            wait_until(saved, timeout_s=timeout_s, what="Redis's BGSAVE")
            directory = Path(str(client.config_get("dir")["dir"]))
            name = str(client.config_get("dbfilename")["dbfilename"])
            version = str(client.info("server")["redis_version"])
    except TimeoutError as exc:
        raise BackendUnavailable(f"Redis's BGSAVE did not finish in {timeout_s:.0f} s") from exc
    with open(directory / name, "rb") as source, open(into, "wb") as target:
        shutil.copyfileobj(source, target)  # one open file: a later save's rename cannot tear it
    return version


@contextmanager
def _scratch_redis(directory: Path, dbfilename: str) -> Iterator[redis.Redis]:
    """A Redis of its own on ``directory/dbfilename`` (loaded at start), with no
    TCP port (a unix socket in ``directory``) and no persistence of its own;
    shut down without saving when the block ends.

    Raises:
        ConfigurationError: it did not start, or the file did not load.
    """
    sockets = Path(tempfile.mkdtemp(prefix="memjobs-redis-"))  # short: a socket path is ≤ 107 bytes
    socket = sockets / "redis.sock"
    log = directory / "scratch.log"
    process = subprocess.Popen(  # noqa: S603 - redis-server with our arguments
        [
            find_redis_server(),
            "--port",
            "0",
            "--unixsocket",
            str(socket),
            "--unixsocketperm",
            "700",
            "--dir",
            str(directory),
            "--dbfilename",
            dbfilename,
            "--appendonly",
            "no",
            "--save",
            "",
            "--logfile",
            str(log),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    client = redis.Redis(unix_socket_path=str(socket), socket_timeout=30)
    try:
        with redis_best_effort() as attempt:
            wait_until(lambda: _answers(client, process), timeout_s=60, what="a scratch Redis")
            yield client
            client.shutdown(nosave=True)
        # A connection closed by a server that exited is SHUTDOWN's own answer.
        if attempt.error is not None and (
            not isinstance(attempt.error, redis.ConnectionError) or process.poll() is None
        ):
            raise ConfigurationError(f"the Redis snapshot did not load: {attempt.error}; see {log}") from attempt.error
    except TimeoutError as exc:
        raise ConfigurationError(f"the Redis snapshot did not load: {exc}; see {log}") from exc
    finally:
        client.close()
        if process.poll() is None:
            process.terminate()
        process.wait(60)
        log.unlink(missing_ok=True)
        shutil.rmtree(sockets, ignore_errors=True)


def scrub_snapshot(rdb: Path) -> dict[str, int]:
    """Drop what must not leave the stack from the RDB file ``rdb``: the web
    console's signing keys and sessions (every console user logs in again on
    a restored stack). Loading it also proves the snapshot whole. Returns the
    queued messages and dead letters it holds.

    Raises:
        ConfigurationError: the snapshot did not load.
    """
    with _scratch_redis(rdb.parent, rdb.name) as client:
        for pattern in CONSOLE_PATTERNS:
            for name in list(client.scan_iter(match=pattern, count=500)):
                client.delete(name)
        counts = _counts(client)
        client.save()
    return counts


def load_redis_snapshot(rdb: Path, directory: Path, timeout_s: float = SNAPSHOT_TIMEOUT_S) -> dict[str, int]:
    """Turn the RDB ``rdb`` into the append-only file of a Redis in ``directory``.

    A scratch Redis loads the RDB, gives the jobs the backed-up workers held
    back to their queues (:func:`return_unacknowledged`), drops their
    heartbeats, writes its append-only file and shuts down. Returns the queued
    messages (ready, delayed and returned: ``queued``, of which ``returned``) and
    dead letters (``dead``) it holds.

    Raises:
        ConfigurationError: the snapshot did not load.
    """
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    shutil.copyfile(rdb, directory / RDB_NAME)
    with _scratch_redis(directory, RDB_NAME) as client:
        returned = return_unacknowledged(client)
        client.config_set("appendonly", "yes")  # starts a rewrite: the keyspace becomes the AOF's base

        def rewritten() -> bool:
            info = client.info("persistence")
            return (
                info.get("aof_enabled") == 1
                and not info.get("aof_rewrite_in_progress")
                and not info.get("aof_rewrite_scheduled")
                and info.get("aof_last_bgrewrite_status") == "ok"
            )

        wait_until(rewritten, timeout_s=timeout_s, what="the restored Redis's append-only file")
        counts = {**_counts(client), "returned": returned}
    (directory / RDB_NAME).unlink(missing_ok=True)
    return counts


def _answers(client: redis.Redis, process: subprocess.Popen[bytes]) -> bool:
    if process.poll() is not None:
        raise TimeoutError("redis-server exited while loading the snapshot")
    with redis_best_effort():
        return bool(client.ping())
    return False


def _counts(client: redis.Redis) -> dict[str, int]:
    queued = sum(int(client.llen(keys.queue(q))) + int(client.llen(keys.delay_queue(q))) for q in QUEUES)
    dead = sum(int(client.zcard(keys.dead_letters(q))) for q in QUEUES)
    return {"queued": queued, "dead": dead}


def return_unacknowledged(client: redis.Redis) -> int:
    """In a Redis no worker consumes yet: put every message a consumer held
    unacknowledged back on its queue and drop the consumers' heartbeats — what
    Dramatiq's maintenance does for a dead consumer, done at once. Returns how
    many messages went back."""
    returned = 0
    for raw in list(client.scan_iter(match=keys.ACKS_PATTERN, count=500)):
        name = as_str(raw)
        queue_name = name.split(".", 1)[1].split(".", 1)[1] if name.count(".") >= 2 else ""
        ids = list(client.smembers(name))
        if ids and keys.acked_queue(name, QUEUES) is not None:
            client.rpush(f"{keys.NAMESPACE}:{queue_name}", *ids)
            returned += len(ids)
        client.delete(name)
    client.delete(keys.BROKER_HEARTBEATS)
    for raw in list(client.scan_iter(match=keys.HEARTBEAT_PREFIX + "*", count=500)):
        client.delete(raw)
    return returned
