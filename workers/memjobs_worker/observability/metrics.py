"""Prometheus metrics. Labels are job kinds, queues, outcomes and reasons: never
an owner id, a session id or any text.

Worker processes write their samples to ``PROMETHEUS_MULTIPROC_DIR`` (set by
``memjobs worker``/``memjobs up`` before any process starts, the directory
emptied first); the exposition process (:mod:`memjobs_worker.ops.server`) merges
them and adds what is read at scrape time (queues, heartbeats, ledger states).
"""

from __future__ import annotations

from prometheus_client import Counter, Histogram

JOBS_ENQUEUED = Counter(
    "memjobs_jobs_enqueued_total",
    "Jobs enqueued by workers (follow-ups and retries).",
    ["actor"],
)
JOBS = Counter("memjobs_jobs_total", "Jobs finished, by actor and outcome.", ["actor", "outcome"])
JOB_SECONDS = Histogram(
    "memjobs_job_duration_seconds",
    "Time spent executing a job, by actor.",
    ["actor"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300),
)
QUEUE_WAIT_SECONDS = Histogram(
    "memjobs_job_queue_wait_seconds",
    "Time from enqueue (or the end of a requested delay) to the start of execution, by actor.",
    ["actor"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600),
)
WRITTEN_TOGETHER = Histogram(
    "memjobs_written_together",
    "How many calls a cheap pool's group commit wrote in one batch, by what (remembers, acks).",
    ["what"],
    buckets=(1, 2, 4, 8, 16, 32, 64),
)
DEAD_LETTERED = Counter("memjobs_dead_lettered_total", "Messages moved to a dead-letter queue, by queue.", ["queue"])
#: Dead letters replayed and purged by operators, by queue. The CLI and the API do
#: that, short-lived or in another registry, so the counts live in Redis
#: (:data:`memjobs_client.keys.DEAD_LETTER_ACTIONS`, bumped in the same script
#: that takes a letter out) and the workers' endpoint exports them at scrape time
#: (:class:`memjobs_worker.ops.collectors.QueueCollector`).
DEAD_LETTERS_RETRIED = ("memjobs_dead_letters_retried", "Dead letters replayed by an operator, by queue.")
DEAD_LETTERS_PURGED = ("memjobs_dead_letters_purged", "Dead letters purged by an operator, by queue.")
REFUSED = Counter("memjobs_refused_total", "Inputs refused, by reason (e.g. sensitive_content).", ["reason"])
ERASED_OWNER_JOBS_DROPPED = Counter(
    "memjobs_erased_owner_jobs_dropped_total",
    "Jobs dropped unrun because their owner was being (or had just been) erased, by actor.",
    ["actor"],
)
NEWER_SCHEMA_DEFERRED = Counter(
    "memjobs_newer_schema_deferred_total",
    "Messages of a newer schema version than this worker reads, requeued for a newer worker, by actor.",
    ["actor"],
)
LOCK_EVENTS = Counter(
    "memjobs_lock_events_total",
    "Lease-lock outcomes: acquired, busy, renewed, lost, released, stale_commit.",
    ["lock", "event"],
)
MODEL_CALLS = Counter(
    "memjobs_model_calls_total",
    "Model and embedding calls, by purpose and outcome.",
    ["purpose", "outcome"],
)
MODEL_SECONDS = Histogram(
    "memjobs_model_call_duration_seconds",
    "Latency of model and embedding calls.",
    ["purpose"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60),
)


def record_model_call(purpose: str, outcome: str, seconds: float) -> None:
    MODEL_CALLS.labels(purpose, outcome).inc()
    MODEL_SECONDS.labels(purpose).observe(seconds)


def lock_hook(lock: str) -> LockHook:
    return LockHook(lock)


class LockHook:
    """Counts a lock's events under its name (``learn``), never its owner."""

    def __init__(self, lock: str) -> None:
        self.lock = lock

    def __call__(self, event: str) -> None:
        LOCK_EVENTS.labels(self.lock, event).inc()
