"""pgvector in the state database: the one availability check and the column type.

memjobs needs pgvector twice — mem0 keeps its memories' vectors in it, and the
knowledge corpus its chunks' embeddings — so both rely on the same check
(:func:`check_pgvector`, run before any migration) and the extension is created
by the migrations. :class:`Vector` is the SQLAlchemy type of a ``vector``
column; values travel as pgvector's text literal (``[1,2,3]``), so no pgvector
Python package is needed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect, Engine

from memjobs_client.errors import BackendUnavailable, ConfigurationError
from memjobs_worker.logs.redaction import redact_url


def check_pgvector(engine: Engine) -> None:
    """Refuse a database whose server has no pgvector, naming the fix.

    Raises:
        ConfigurationError: the ``vector`` extension is not available.
        BackendUnavailable: the database did not answer.
    """
    try:
        with engine.connect() as conn:
            available = conn.execute(sa.text("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")).first()
    except sa.exc.OperationalError as exc:
        raise BackendUnavailable(
            f"the state database at {redact_url(str(engine.url.render_as_string()))} did not answer"
        ) from exc
    if available is None:
        raise ConfigurationError(
            "the database at "
            f"{engine.url.render_as_string(hide_password=True)} has no pgvector extension "
            "(memjobs stores mem0's vectors and knowledge embeddings there): install pgvector "
            "on that server (e.g. `apt-get install postgresql-15-pgvector`), or leave "
            "MEMJOBS_DATABASE_URL unset to use the embedded PostgreSQL"
        )


class Vector(sa.types.UserDefinedType[list[float]]):
    """pgvector's ``vector``, as a Python list of floats.

    Parameters:
        dims: a fixed dimension, or None for a column that holds vectors of any
            dimension (the knowledge corpus: its embedding model is configuration).
    """

    cache_ok = True

    def __init__(self, dims: int | None = None) -> None:
        self.dims = dims

    def get_col_spec(self, **kw: Any) -> str:
        return "vector" if self.dims is None else f"vector({self.dims})"

    def bind_processor(self, dialect: Dialect) -> Callable[[list[float] | None], str | None]:
        def process(value: list[float] | None) -> str | None:
            return None if value is None else vector_literal(value)

        return process

    def result_processor(self, dialect: Dialect, coltype: object) -> Callable[[Any], list[float] | None]:
        def process(value: Any) -> list[float] | None:
            if value is None:
                return None
            if isinstance(value, str):
                inner = value.strip()[1:-1]
                return [float(x) for x in inner.split(",")] if inner else []
            return [float(x) for x in value]

        return process


def vector_literal(values: Sequence[float]) -> str:
    """pgvector's text form of ``values``.

    Raises:
        ValueError: a value is NaN or infinite (pgvector refuses them).
    """
    floats = [float(v) for v in values]
    if not all(math.isfinite(v) for v in floats):
        raise ValueError("vector values must be finite")
    return "[" + ",".join(repr(v) for v in floats) + "]"


def reflect_vector(dialect: Dialect) -> None:
    """Let this dialect instance reflect ``vector`` columns as :class:`Vector`
    (schema comparison), without touching SQLAlchemy's shared type table."""
    names: dict[str, Any] = getattr(dialect, "ischema_names", {})
    if names.get("vector") is not Vector:
        dialect.ischema_names = {**names, "vector": Vector}  # type: ignore[attr-defined]
