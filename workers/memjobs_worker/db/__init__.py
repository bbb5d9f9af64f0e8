"""The state database: engine creation, pgvector check, migrations."""

from memjobs_worker.db.connect import create_db_engine, sqlalchemy_url
from memjobs_worker.db.migrate import migrate

__all__ = ["create_db_engine", "migrate", "sqlalchemy_url"]
