"""Personal memory: the ledger of sources, extraction with mem0, recall and forget.

- :mod:`~memjobs_worker.memory.intake`: remembering a source and scheduling its extraction.
- :mod:`~memjobs_worker.memory.pipeline`: extraction under the owner's lease, forget.
- :mod:`~memjobs_worker.memory.service`: forget, recall and the reads, one path for every door.
- :mod:`~memjobs_worker.memory.store`: the ledger (PostgreSQL, and an in-memory twin).
- :mod:`~memjobs_worker.memory.engine`: mem0 behind a small seam (and its twin).
- :mod:`~memjobs_worker.memory.build`: the feature's parts built from settings.
- :mod:`~memjobs_worker.memory.actors`: the Dramatiq actors.
"""
