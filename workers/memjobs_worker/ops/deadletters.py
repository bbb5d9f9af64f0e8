"""Dead letters: list them without text, show one redacted, replay or purge them.

Dramatiq's Redis broker keeps, per queue, the ids of dead-lettered messages in
the sorted set ``<queue>.XQ`` (scored by when they died, epoch ms) and their
data in the hash ``<queue>.XQ.msgs``; its maintenance drops letters older than
the broker's ``dead_message_ttl`` (7 days). A letter's member id is the
broker's per-enqueue ``redis_message_id``; Dramatiq's ``message_id`` (the one
the job log lines carry) is kept across retries and replays. Either names a
letter here.

The reason and the failure times come from the record the workers keep on
every failing message (:mod:`memjobs_worker.observability.failures`); for a
letter without one, the class name on the last line of Dramatiq's traceback.
Nothing listed carries payload text or an owner id: only the first characters
of the owner *key* (sha256 of the id). :meth:`DeadLetters.show` redacts every
string of the payload but ids and enumerations unless asked to reveal.

Replays are safe because every job is idempotent (the ledger's states, the
content hashes): a letter is taken out of the set in one script (ZREM decides
who replays it, so two operators retrying at once enqueue it once), then sent
through the broker on its original queue with its retry state cleared; if the
send fails it is put back. Retried and purged letters are counted in Redis
(:data:`~memjobs_client.keys.DEAD_LETTER_ACTIONS`), so the counters cover
every process that acted (CLI, API) and are exported at scrape time.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

import dramatiq
import redis
from dramatiq import Message

from memjobs_client import keys
from memjobs_client.contracts import QUEUES
from memjobs_client.errors import BackendUnavailable
from memjobs_client.redis_seam import as_bytes, as_str, redis_best_effort, redis_errors
from memjobs_worker.logs import redact_text
from memjobs_worker.observability.failures import REPLAYS_OPTION, failure_record

#: Letters read per queue at most (the newest first).
SCAN_LIMIT = 10_000
#: Characters of the owner key shown (enough to tell owners apart, not to look one up).
OWNER_PREFIX_CHARS = 12
#: Payload fields shown as they are by :meth:`DeadLetters.show`: ids, enumerations, times.
SAFE_FIELDS = frozenset(
    {
        "schema_version",
        "source_id",
        "kind",
        "trigger",
        "status",
        "role",
        "ts",
        "consent",
        "corpus_id",
        "index",
        "count",
        "reason",
    }
)
#: Options a replay clears: Dramatiq's retry state and the broker's per-enqueue ids.
_RETRY_STATE = ("retries", "traceback", "requeue_timestamp", "eta", "redis_message_id")

#: Take letters out of the set (and count them): only ids still there are taken.
_TAKE = """
local taken, n = {}, 0
for i = 2, #ARGV do
  if redis.call('zrem', KEYS[1], ARGV[i]) == 1 then
    n = n + 1
    table.insert(taken, ARGV[i])
    table.insert(taken, redis.call('hget', KEYS[2], ARGV[i]) or '')
    redis.call('hdel', KEYS[2], ARGV[i])
  end
end
if ARGV[1] ~= '' and n > 0 then
  redis.call('hincrby', KEYS[3], ARGV[1], n)
end
return taken
"""
#: Put a letter back (its replay could not be sent).
_RESTORE = """
redis.call('zadd', KEYS[1], ARGV[1], ARGV[2])
redis.call('hset', KEYS[2], ARGV[2], ARGV[3])
"""


@dataclass(frozen=True)
class DeadLetter:
    """One dead letter, as listed: no text, no owner id."""

    message_id: str
    redis_id: str
    queue: str
    actor: str
    reason: str
    attempts: int
    first_failed_at: datetime | None
    last_failed_at: datetime
    owner: str | None  # the first characters of the owner key
    replays: int

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for name in ("first_failed_at", "last_failed_at"):
            out[name] = out[name].isoformat() if out[name] is not None else None
        return out


@dataclass(frozen=True)
class _Entry:
    letter: DeadLetter
    score: float
    data: bytes
    message: dict[str, Any] | None  # None: undecodable


def _ms(value: float) -> datetime:
    return datetime.fromtimestamp(value / 1000, UTC)


def _decode(data: bytes) -> dict[str, Any] | None:
    try:
        message = json.loads(data)
    except ValueError:
        return None
    return message if isinstance(message, dict) else None


def _traceback_reason(traceback_text: str) -> str:
    """The exception's class name on the traceback's last line (never its message)."""
    lines = [line.strip() for line in traceback_text.strip().splitlines() if line.strip()]
    if not lines:
        return "unknown"
    name = lines[-1].split(":", 1)[0].rsplit(".", 1)[-1]
    return name if name.isidentifier() and len(name) <= 64 else "unknown"


def _entry(queue: str, redis_id: str, score: float, data: bytes) -> _Entry:
    message = _decode(data)
    if message is None:
        letter = DeadLetter("?", redis_id, queue, "?", "undecodable_message", 0, None, _ms(score), None, 0)
        return _Entry(letter, score, data, None)
    raw_options = message.get("options")
    options: dict[str, Any] = raw_options if isinstance(raw_options, dict) else {}
    record = failure_record(options)
    retries = int(options.get("retries") or 0)
    reason = str(record.get("reason") or _traceback_reason(str(options.get("traceback") or "")))
    first = record.get("first_ms")
    args = message.get("args")
    payload = args[0] if isinstance(args, list) and args and isinstance(args[0], dict) else {}
    key = payload.get("owner_key")
    letter = DeadLetter(
        message_id=str(message.get("message_id", "?")),
        redis_id=redis_id,
        queue=queue,
        actor=str(message.get("actor_name", "?")),
        reason=reason,
        attempts=int(record.get("attempts") or retries + 1),
        first_failed_at=_ms(float(first)) if first else None,
        last_failed_at=_ms(score),
        owner=key[:OWNER_PREFIX_CHARS] if isinstance(key, str) else None,
        replays=int(options.get(REPLAYS_OPTION) or 0),
    )
    return _Entry(letter, score, data, message)


def redact(value: Any, field: str | None = None) -> Any:
    """A payload with every string replaced by its length, but ids and enumerations
    (:data:`SAFE_FIELDS`) and the owner key (shortened)."""
    if isinstance(value, dict):
        return {k: redact(v, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v, field) for v in value]
    if isinstance(value, str):
        if field == "owner_key":
            return value[:OWNER_PREFIX_CHARS] + "…"
        if field in SAFE_FIELDS:
            return value
        return f"[redacted: {len(value)} characters]"
    return value


class DeadLetters:
    """The dead letters of every memjobs queue.

    Parameters:
        client: Redis (the broker's).
        broker: the broker replays are sent through (not needed to list or purge).
    """

    def __init__(self, client: redis.Redis, broker: dramatiq.Broker | None = None) -> None:
        self.client = client
        self.broker = broker
        self._take = client.register_script(_TAKE)
        self._restore = client.register_script(_RESTORE)

    # reading -----------------------------------------------------------------

    def letters(self, queue: str | None = None) -> list[DeadLetter]:
        """Every letter (of ``queue``, or of all), the latest failure first."""
        return [e.letter for e in self._entries(queue)]

    def count(self) -> dict[str, int]:
        """Letters per queue."""
        with redis_errors():
            pipe = self.client.pipeline(transaction=False)
            for queue in QUEUES:
                pipe.zcard(keys.dead_letters(queue))
            return {q: int(n) for q, n in zip(QUEUES, pipe.execute(), strict=True)}

    def show(self, ident: str, *, reveal: bool = False) -> dict[str, Any] | None:
        """One letter: its listing, its options and its payload, redacted unless ``reveal``
        (then also the last line of its traceback, secrets redacted)."""
        entry = self._find(ident)
        if entry is None:
            return None
        out: dict[str, Any] = {**entry.letter.as_dict()}
        message = entry.message
        if message is None:
            out["payload"] = None
            return out
        options = dict(message.get("options") or {})
        traceback_text = str(options.pop("traceback", "") or "")
        out["options"] = {k: v for k, v in options.items() if k in ("retries", "max_retries", "requeue_timestamp")}
        args = message.get("args") or []
        payload = args[0] if args and isinstance(args[0], dict) else {}
        out["payload"] = payload if reveal else redact(payload)
        if reveal:
            lines = [line for line in traceback_text.strip().splitlines() if line.strip()]
            out["error"] = redact_text(lines[-1].strip())[:300] if lines else None
        return out

    def totals(self) -> dict[str, dict[str, int]]:
        """Letters retried and purged so far, by queue: ``{"retried": {…}, "purged": {…}}``."""
        with redis_errors():
            raw = self.client.hgetall(keys.DEAD_LETTER_ACTIONS)
        out: dict[str, dict[str, int]] = {"retried": {}, "purged": {}}
        for field, n in raw.items():
            action, _, queue = as_str(field).partition(":")
            if action in out and queue in QUEUES:
                out[action][queue] = int(n)
        return out

    # acting --------------------------------------------------------------------

    def retry(self, ident: str) -> bool:
        """Replay one letter on its queue; False when no letter has this id (or another
        operator replayed it first)."""
        entry = self._find(ident)
        return entry is not None and self._replay([entry]) == 1

    def retry_all(self, queue: str | None = None) -> tuple[int, int]:
        """Replay every letter (of ``queue``): ``(replayed, skipped)``; an undecodable
        letter cannot be replayed and stays (purge it)."""
        entries = self._entries(queue)
        replayable = [e for e in entries if e.message is not None]
        return self._replay(replayable), len(entries) - len(replayable)

    def purge(self, ident: str) -> bool:
        """Delete one letter; False when there is none of this id."""
        entry = self._find(ident)
        return entry is not None and self._take_ids(entry.letter.queue, [entry.letter.redis_id], "purged") != {}

    def purge_all(self, queue: str | None = None, older_than_s: float | None = None) -> int:
        """Delete every letter (of ``queue``; dead longer than ``older_than_s``): how many."""
        cutoff = None if older_than_s is None else time.time() * 1000 - older_than_s * 1000
        purged = 0
        for name in self._queues(queue):
            with redis_errors():
                hi = "+inf" if cutoff is None else f"({cutoff:.0f}"
                ids = [as_str(i) for i in self.client.zrangebyscore(keys.dead_letters(name), "-inf", hi)]
            for start in range(0, len(ids), 500):
                purged += len(self._take_ids(name, ids[start : start + 500], "purged"))
        return purged

    def retry_ids(self, letters: Iterable[tuple[str, str]]) -> tuple[int, int]:
        """Replay exactly these letters (``(queue, redis id)`` pairs: those an operator
        saw), not any that arrived since: ``(replayed, skipped)``; a letter already gone
        or undecodable is skipped."""
        wanted = list(letters)
        entries = self._by_ids(wanted)
        replayable = [e for e in entries if e.message is not None]
        replayed = self._replay(replayable)
        return replayed, len(wanted) - replayed

    def purge_ids(self, letters: Iterable[tuple[str, str]]) -> int:
        """Delete exactly these letters (``(queue, redis id)`` pairs): how many were
        still there. A letter that arrived since is not among them, so it stays."""
        by_queue: dict[str, list[str]] = {}
        for queue, redis_id in letters:
            by_queue.setdefault(queue, []).append(redis_id)
        purged = 0
        for name, ids in by_queue.items():
            self._queues(name)
            for start in range(0, len(ids), 500):
                purged += len(self._take_ids(name, ids[start : start + 500], "purged"))
        return purged

    # internals -----------------------------------------------------------------

    @staticmethod
    def _queues(queue: str | None) -> tuple[str, ...]:
        if queue is None:
            return QUEUES
        if queue not in QUEUES:
            raise ValueError(f"no queue {queue!r}: one of {', '.join(QUEUES)}")
        return (queue,)

    def _entries(self, queue: str | None) -> list[_Entry]:
        entries: list[_Entry] = []
        with redis_errors():
            for name in self._queues(queue):
                dead = keys.dead_letters(name)
                members: list[tuple[Any, float]] = self.client.zrevrange(  # type: ignore[assignment]
                    dead, 0, SCAN_LIMIT - 1, withscores=True
                )
                if not members:
                    continue
                ids = [as_str(m) for m, _ in members]
                datas: list[Any] = self.client.hmget(f"{dead}.msgs", ids)
                for (_, score), redis_id, data in zip(members, ids, datas, strict=True):
                    if data is not None:
                        raw = as_bytes(data)
                        entries.append(_entry(name, redis_id, float(score), raw))
        entries.sort(key=lambda e: e.score, reverse=True)
        return entries

    def _by_ids(self, letters: list[tuple[str, str]]) -> list[_Entry]:
        """The entries of these ``(queue, redis id)`` letters still dead, in one round trip."""
        for queue, _ in letters:
            self._queues(queue)
        with redis_errors(), self.client.pipeline(transaction=False) as pipe:
            for queue, redis_id in letters:
                pipe.zscore(keys.dead_letters(queue), redis_id)
                pipe.hget(f"{keys.dead_letters(queue)}.msgs", redis_id)
            answers = pipe.execute()
        entries = []
        for i, (queue, redis_id) in enumerate(letters):
            score, data = answers[2 * i], answers[2 * i + 1]
            if score is not None and data is not None:
                raw = as_bytes(data)
                entries.append(_entry(queue, redis_id, float(score), raw))
        return entries

    def _find(self, ident: str) -> _Entry | None:
        return next((e for e in self._entries(None) if ident in (e.letter.redis_id, e.letter.message_id)), None)

    def _take_ids(self, queue: str, ids: Iterable[str], action: str) -> dict[str, bytes]:
        """Take ``ids`` out of ``queue``'s dead letters in one script: {id: data} of those taken."""
        dead = keys.dead_letters(queue)
        counted = f"{action}:{queue}" if action else ""
        with redis_errors():
            taken = self._take(keys=[dead, f"{dead}.msgs", keys.DEAD_LETTER_ACTIONS], args=[counted, *ids])
        pairs = iter(taken)
        return {as_str(i): d for i, d in zip(pairs, pairs, strict=True)}

    def _replay(self, entries: list[_Entry]) -> int:
        if self.broker is None:
            raise ValueError("replaying dead letters needs the broker")
        replayed = 0
        for entry in entries:
            letter, message = entry.letter, entry.message
            assert message is not None
            if letter.redis_id not in self._take_ids(letter.queue, [letter.redis_id], ""):
                continue  # someone else took it
            options = {
                k: v
                for k, v in (message.get("options") or {}).items()
                if k not in _RETRY_STATE and not str(k).startswith("_memjobs_")
            }
            options[REPLAYS_OPTION] = letter.replays + 1
            replay: Message[Any] = Message(
                queue_name=letter.queue,
                actor_name=letter.actor,
                args=tuple(message.get("args") or ()),
                kwargs=message.get("kwargs") or {},
                options=options,
                message_id=letter.message_id,
                message_timestamp=int(message.get("message_timestamp") or time.time() * 1000),
            )
            with redis_best_effort() as attempt:
                self.broker.enqueue(replay)
                self.client.hincrby(keys.DEAD_LETTER_ACTIONS, f"retried:{letter.queue}", 1)
            if attempt.failed:
                with redis_best_effort():  # nothing more can be done: Redis is gone
                    dead = keys.dead_letters(letter.queue)
                    self._restore(keys=[dead, f"{dead}.msgs"], args=[f"{entry.score:.0f}", letter.redis_id, entry.data])
                raise BackendUnavailable(f"Redis did not take the replay: {attempt.error}") from attempt.error
            replayed += 1
        return replayed
