"""Every actor of memjobs, declared by its feature package and bound to one
process's :class:`~memjobs_worker.runtime.Runtime`."""

from __future__ import annotations

import dramatiq

from memjobs_worker.jobs import Actors
from memjobs_worker.knowledge.actors import declare_knowledge_actors
from memjobs_worker.memory.actors import declare_memory_actors
from memjobs_worker.runtime import Runtime
from memjobs_worker.sessions.actors import declare_session_actors


def declare_actors(broker: dramatiq.Broker, runtime: Runtime) -> Actors:
    """Register memjobs' actors on ``broker``; their parts are built on first use."""
    settings = runtime.settings
    rules = settings.source_rules()
    lease_ms = settings.memory.lease_ms  # every job's lease: an extraction's, a session run's, a reindex lock's
    actors = {
        **declare_memory_actors(
            broker,
            settings.memory,
            settings.workers,
            rules=rules,
            parts=runtime,  # the feature reads its parts alone (MemoryParts)
        ),
        **declare_session_actors(
            broker,
            settings.sessions,
            settings.workers,
            rules=rules,
            lease_ms=lease_ms,
            parts=runtime,  # the feature reads its parts alone (SessionParts)
        ),
    }
    if settings.knowledge.enabled:  # opt-in: off, no worker consumes the knowledge queue
        actors.update(
            declare_knowledge_actors(
                broker,
                settings.knowledge,
                settings.embedding,
                settings.workers,
                rules=rules,
                lease_ms=lease_ms,
                parts=runtime,  # the feature reads its three parts alone (KnowledgeParts)
            )
        )
    return actors
