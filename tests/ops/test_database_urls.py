"""Database URLs naming several hosts, and what counts as a database outage
(server-free: no connection is opened)."""

from __future__ import annotations

import psycopg
import pytest
import sqlalchemy as sa

from memjobs_client.errors import BackendUnavailable, ConfigurationError
from memjobs_worker.db.connect import libpq_url, sqlalchemy_url
from memjobs_worker.db.outage import is_outage
from memjobs_worker.logs.redaction import redact_url


def connect_args(url: str) -> dict[str, object]:
    engine = sa.create_engine(sqlalchemy_url(url))
    try:
        return dict(engine.dialect.create_connect_args(engine.url)[1])
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u:pw@db1:5432,db2:5433/memjobs?target_session_attrs=read-write",
        "postgres://u:pw@/memjobs?host=db1,db2&port=5432,5433&target_session_attrs=read-write",
    ],
)
def test_a_multi_host_url_reaches_psycopg_as_libpq_host_and_port_lists(url: str) -> None:
    args = connect_args(url)
    assert (args["host"], args["port"]) == ("db1,db2", "5432,5433")
    assert (args["dbname"], args["user"], args["password"]) == ("memjobs", "u", "pw")
    assert args["target_session_attrs"] == "read-write"
    assert libpq_url(url).startswith("postgresql://")  # libpq reads every form itself


def test_a_single_host_url_is_unchanged_but_for_the_driver() -> None:
    assert sqlalchemy_url("postgres://u@h:5/db?sslmode=require") == "postgresql+psycopg://u@h:5/db?sslmode=require"


def test_one_port_for_several_hosts_applies_to_each() -> None:
    assert connect_args("postgresql://u@/db?host=a,b&port=6000")["port"] == "6000,6000"


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("postgresql://u@/db?host=a,b,c&port=1,2", "3 hosts and 2 ports"),
        ("postgresql://u@[::1]:5432,[::2]:5432/db", "IPv6"),
        ("mysql://u@h/db", "postgresql://"),
    ],
)
def test_an_unusable_url_is_refused_in_words(url: str, words: str) -> None:
    with pytest.raises(ConfigurationError, match=words.replace("(", r"\(")):
        sqlalchemy_url(url)


def test_a_multi_host_urls_password_is_redacted() -> None:
    redacted = redact_url("postgresql://u:s3cret-77@db1:5432,db2:5432/memjobs")
    assert "s3cret-77" not in redacted and "db1:5432,db2:5432" in redacted


def _caused_by(outer: BaseException, inner: BaseException) -> BaseException:
    try:
        try:
            raise inner
        except BaseException as exc:
            raise outer from exc
    except BaseException as exc:  # noqa: BLE001 - the chained exception is the value
        return exc


@pytest.mark.parametrize(
    ("exc", "outage"),
    [
        (BackendUnavailable("down"), True),
        (psycopg.OperationalError("connection refused"), True),
        (psycopg.errors.AdminShutdown("terminating connection"), True),
        (psycopg.errors.ReadOnlySqlTransaction("cannot execute INSERT in a read-only transaction"), True),
        (_caused_by(RuntimeError("mem0 wrapped it"), psycopg.OperationalError("gone")), True),
        (psycopg.errors.UniqueViolation("duplicate key"), False),
        (psycopg.errors.DataException("expected 384 dimensions"), False),
        (ValueError("bad input"), False),
    ],
)
def test_what_counts_as_an_outage(exc: BaseException, outage: bool) -> None:
    assert is_outage(exc) is outage
