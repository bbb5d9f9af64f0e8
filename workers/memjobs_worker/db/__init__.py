"""The state database: engine, pgvector, the one metadata, migrations, advisory locks.

- :mod:`~memjobs_worker.db.connect`: the engine and the transaction helper.
- :mod:`~memjobs_worker.db.pgvector`: the pgvector check and ``vector`` column type.
- :mod:`~memjobs_worker.db.metadata`: the one ``MetaData`` every table is defined on,
  and the Alembic branches (``core``, ``knowledge``) that create them.
- :mod:`~memjobs_worker.db.migrate`: applying the migrations (comparing them with
  every feature's tables is :mod:`memjobs_worker.schema`'s, above the features).
- :mod:`~memjobs_worker.db.advisory`: every PostgreSQL advisory lock memjobs takes.
- :mod:`~memjobs_worker.db.idle`: pooled connections closed after a quiet spell.
"""

from memjobs_worker.db.connect import create_db_engine, sqlalchemy_url
from memjobs_worker.db.migrate import migrate

__all__ = ["create_db_engine", "migrate", "sqlalchemy_url"]
