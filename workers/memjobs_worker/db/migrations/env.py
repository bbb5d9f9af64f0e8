"""Alembic environment: run on the connection memjobs hands over.

:func:`memjobs_worker.db.migrate.migrate` passes the connection (already holding
the migrations' advisory lock) in ``config.attributes``. The target metadata is
the one of every memjobs table, so autogenerate compares (and would write
migrations for) the same tables the code reads; only the tables of the branches
named in ``config.attributes["branches"]`` (default: all) are compared.
"""

from alembic import context

from memjobs_worker.db.metadata import BRANCHES, include_object
from memjobs_worker.schema import schema_metadata

config = context.config
context.configure(
    connection=config.attributes["connection"],
    target_metadata=schema_metadata(),
    include_object=include_object(config.attributes.get("branches", BRANCHES)),
    compare_type=True,
    transaction_per_migration=True,
)
with context.begin_transaction():
    context.run_migrations()
