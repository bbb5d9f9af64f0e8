"""Tests for memjobs_worker.logs: JSON Lines output, redaction, privacy by default."""

from __future__ import annotations

import io
import json
import logging
import re
import time
from dataclasses import dataclass
from typing import Any

import pytest

from memjobs_worker.logs import (
    MEM0_SUPPRESSED_MSG,
    NOISY_LOGGERS,
    OMITTED,
    REDACTED,
    TEXT_FIELDS,
    JsonFormatter,
    _JsonLinesHandler,
    configure_logging,
    redact,
    redact_text,
)


def lines(stream: io.StringIO) -> list[dict[str, Any]]:
    raw = stream.getvalue().splitlines()
    return [json.loads(line) for line in raw]


def only(stream: io.StringIO) -> dict[str, Any]:
    out = lines(stream)
    assert len(out) == 1, out
    return out[0]


# --- redact() ---------------------------------------------------------------


def test_redact_nested_keys() -> None:
    data = {
        "headers": {"Authorization": "Bearer abc", "Accept": "application/json"},
        "api_key": "sk-live-1234567890abcdefXYZ",
        "cookie": "x",
        "Set-Cookie": "sid=1",
        "nested": [{"password": "hunter2", "name": "ok"}, {"refresh_token": "t"}],
        "DATABASE_DSN": "postgresql://u:p@h/db",
        "client_secret": "s",
        "private-key": "-----BEGIN",
        "openaiApiKey": "k",
        "credentials": {"user": "u"},
        "pwd": 1234,
        "owner_key": "a" * 64,
        "prompt_tokens": 12,
        "count": 3,
    }
    out = redact(data)
    assert out["headers"] == {"Authorization": REDACTED, "Accept": "application/json"}
    for k in (
        "api_key",
        "cookie",
        "Set-Cookie",
        "DATABASE_DSN",
        "client_secret",
        "private-key",
        "openaiApiKey",
        "credentials",
        "pwd",
    ):
        assert out[k] == REDACTED, k
    assert out["nested"] == [{"password": REDACTED, "name": "ok"}, {"refresh_token": REDACTED}]
    # Not secrets: the owner hash and usage counters survive.
    assert out["owner_key"] == "a" * 64
    assert out["prompt_tokens"] == 12
    assert out["count"] == 3
    # Input untouched.
    assert data["headers"]["Authorization"] == "Bearer abc"  # type: ignore[index]


def test_redact_does_not_omit_text_fields() -> None:
    # redact() is about secrets; text omission is the formatter's job.
    assert redact({"text": "hello"}) == {"text": "hello"}


#: Secrets in text, each with what must not survive redaction and what must
#: stand in its place: in URLs (userinfo, query parameters) ...
_SECRETS_IN_URLS = [
    ("connect postgresql://memjobs:s3cr3t@db:5432/mem", "s3cr3t", f"postgresql://{REDACTED}@db:5432/mem"),
    ("redis://:p4ss@localhost:6379/0", "p4ss", f"redis://{REDACTED}@localhost"),
    ("GET https://alice:pw@example.com/x?y=1", "alice", f"https://{REDACTED}@example.com"),
    ("https://h/cb?password=hunter2&x=1", "hunter2", f"?password={REDACTED}&x=1"),
    ("https://h/cb?a=1&token=abc123", "abc123", f"&token={REDACTED}"),
    ("next=https://h/cb?password=pw9", "pw9", f"next=https://h/cb?password={REDACTED}"),
]
#: ... as tokens, in HTTP headers or shaped like a provider's key ...
_SECRETS_AS_TOKENS = [
    ("header Bearer eyJhbGciOi.abc.def sent", "eyJhbGciOi", f"Bearer {REDACTED} sent"),
    ("Authorization: Basic dXNlcjpwYXNz", "dXNlcjpwYXNz", f"Authorization: {REDACTED}"),
    ("Cookie: sid=abc; theme=dark", "sid=abc", f"Cookie: {REDACTED}"),
    ("key sk-proj-ABCDEFGHIJKLMNOPQRSTUV used", "ABCDEFGHIJ", f"sk-{REDACTED} used"),
]
#: ... and assigned to a secret's name.
_SECRETS_BY_NAME = [
    ("api_key=sk-abcdef and more", "sk-abcdef", f"api_key={REDACTED} and more"),
    ("OPENAI_API_KEY = 'zzz'", "zzz", f"OPENAI_API_KEY = '{REDACTED}'"),
    ("{'meta': 'dsn=postgres://x'}", "postgres", f"'meta': 'dsn={REDACTED}'"),
    ("{'api_key': 'k123', 'n': 1}", "k123", f"'api_key': '{REDACTED}', 'n': 1"),
    ('{"password": "pw1", "n": 1}', "pw1", f'"password": "{REDACTED}", "n": 1'),
]


@pytest.mark.parametrize(
    ("raw", "must_not_contain", "must_contain"), _SECRETS_IN_URLS + _SECRETS_AS_TOKENS + _SECRETS_BY_NAME
)
def test_redact_text(raw: str, must_not_contain: str, must_contain: str) -> None:
    out = redact_text(raw)
    assert must_not_contain not in out
    assert must_contain in out
    assert redact_text(out) == out  # idempotent


def test_redact_text_leaves_ordinary_text() -> None:
    for s in (
        "job done in 12 ms",
        "max_tokens=256",
        "owner_key=abcdef",
        "see https://example.com/a@b",
    ):
        assert redact_text(s) == s


def test_redact_text_is_linear_on_long_input() -> None:
    # Log lines can carry long blobs; the patterns must not backtrack quadratically.
    blobs = [
        "a" * 200_000,
        "a-" * 100_000,
        "token" * 40_000,
        "x://" + "a" * 200_000,
        ("a" * 50 + "://") * 4_000,
        "'" + "password" * 25_000,
        "a=" * 100_000,
        "'a':" * 50_000,
    ]
    # CPU time of this thread, not wall time: a quadratic pattern costs minutes of CPU
    # on these blobs, and a machine busy with other work only makes the linear ones late.
    start = time.thread_time()
    for blob in blobs:
        redact_text(blob)
    assert time.thread_time() - start < 5.0


def test_redact_strings_inside_structures() -> None:
    out = redact({"url": "amqp://guest:guest@rabbit/", "items": ["Bearer xyz"]})
    assert out == {"url": f"amqp://{REDACTED}@rabbit/", "items": [f"Bearer {REDACTED}"]}


# --- formatter / configure_logging -------------------------------------------


def test_json_lines_core_fields(stream: io.StringIO) -> None:
    log = logging.getLogger("memjobs.test")
    log.info("hello %s", "wörld")
    log.warning("second line\nwith newline")
    raw = stream.getvalue()
    assert raw.count("\n") == 2  # embedded newline is escaped
    assert "wörld" in raw  # ensure_ascii=False
    first, second = lines(stream)
    assert first["msg"] == "hello wörld"
    assert first["level"] == "INFO"
    assert first["logger"] == "memjobs.test"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", first["ts"])
    assert isinstance(first["pid"], int)
    assert first["thread"] == "MainThread"
    assert "exc" not in first and "exc_type" not in first
    assert second["level"] == "WARNING" and second["msg"] == "second line\nwith newline"


def test_extras_included_and_redacted(stream: io.StringIO) -> None:
    logging.getLogger("memjobs.test").info(
        "task done",
        extra={
            "owner_key": "f" * 64,
            "attempt": 2,
            "duration_ms": 1.5,
            "api_key": "sk-secret",
            "meta": {"headers": {"authorization": "Bearer q"}, "ok": True},
            "level": "user-supplied",
        },
    )
    rec = only(stream)
    assert rec["owner_key"] == "f" * 64
    assert rec["attempt"] == 2 and rec["duration_ms"] == 1.5
    assert rec["api_key"] == REDACTED
    assert rec["meta"] == {"headers": {"authorization": REDACTED}, "ok": True}
    # An extra can't overwrite a core field.
    assert rec["level"] == "INFO" and rec["extra_level"] == "user-supplied"


@pytest.mark.parametrize("field", sorted(TEXT_FIELDS | {"user_id"}))
def test_text_and_owner_fields_omitted(stream: io.StringIO, field: str) -> None:
    secret_text = "I told the assistant my diagnosis"
    logging.getLogger("memjobs.test").info("x", extra={field: secret_text})
    rec = only(stream)
    assert rec[field] == OMITTED
    assert secret_text not in stream.getvalue()


def test_text_fields_omitted_when_nested(stream: io.StringIO) -> None:
    logging.getLogger("memjobs.test").info(
        "x", extra={"payload": {"owner_id": "alice@example.com", "items": [{"text": "t1"}], "n": 1}}
    )
    rec = only(stream)
    assert rec["payload"] == {"owner_id": OMITTED, "items": [{"text": OMITTED}], "n": 1}
    assert "alice" not in stream.getvalue()


def test_structured_extras_are_walked(stream: io.StringIO) -> None:
    @dataclass
    class Job:
        owner_id: str
        transcript: str
        token: str
        attempt: int

    logging.getLogger("memjobs.test").info(
        "x", extra={"job": Job("alice", "hello there", "tkn", 1), "blob": b"\x00\x01"}
    )
    rec = only(stream)
    assert rec["job"] == {
        "owner_id": OMITTED,
        "transcript": OMITTED,
        "token": REDACTED,
        "attempt": 1,
    }
    assert rec["blob"] == "<bytes len=2>"
    assert "alice" not in stream.getvalue()


def test_message_url_credentials_redacted(stream: io.StringIO) -> None:
    logging.getLogger("memjobs.db").warning(
        "cannot connect to %s", "postgresql://memjobs:topsecret@127.0.0.1:5432/memjobs"
    )
    rec = only(stream)
    assert "topsecret" not in stream.getvalue()
    assert rec["msg"] == f"cannot connect to postgresql://{REDACTED}@127.0.0.1:5432/memjobs"


def test_exception_info_included_and_redacted(stream: io.StringIO) -> None:
    log = logging.getLogger("memjobs.test")
    try:
        raise RuntimeError("upstream said: Authorization: Bearer abc.def")
    except RuntimeError:
        log.exception("llm call failed", extra={"attempt": 3})
    rec = only(stream)
    assert rec["level"] == "ERROR"
    assert rec["exc_type"] == "RuntimeError"
    assert rec["exc"].startswith("Traceback (most recent call last):")
    assert "RuntimeError: upstream said" in rec["exc"]
    assert "abc.def" not in stream.getvalue()
    assert rec["attempt"] == 3


def test_exception_type_is_qualified_for_non_builtins(stream: io.StringIO) -> None:
    try:
        json.loads("{")
    except json.JSONDecodeError:
        logging.getLogger("memjobs.test").exception("bad")
    assert only(stream)["exc_type"] == "json.decoder.JSONDecodeError"


@pytest.mark.parametrize("name", ["mem0", "mem0.memory.main", "mem0ai.x"])
def test_mem0_records_suppressed(stream: io.StringIO, name: str) -> None:
    log = logging.getLogger(name)
    memory_text = "user is allergic to peanuts"
    log.warning(f"Skipping duplicate memory: {memory_text}", extra={"memory_id": "m1"})
    try:
        raise ValueError(memory_text)
    except ValueError:
        log.exception("Error processing memory %s", memory_text)
    raw = stream.getvalue()
    assert memory_text not in raw
    first, second = lines(stream)
    assert first["msg"] == MEM0_SUPPRESSED_MSG
    assert first["logger"] == name and first["level"] == "WARNING"
    assert "memory_id" not in first
    assert second["exc_type"] == "ValueError"
    assert "exc" not in second


def test_noisy_loggers_capped(stream: io.StringIO) -> None:
    for n in NOISY_LOGGERS:
        assert logging.getLogger(n).level == logging.WARNING
    logging.getLogger("httpx").info("HTTP Request: POST https://api.openai.com")
    logging.getLogger("mem0.vector_stores").info("Inserting 1 vectors")
    assert stream.getvalue() == ""


def test_configure_is_idempotent(restore_logging: None) -> None:
    root = logging.getLogger()
    first, second = io.StringIO(), io.StringIO()
    configure_logging(level="INFO", stream=first)
    configure_logging(level="WARNING", stream=second)
    ours = [h for h in root.handlers if isinstance(h, _JsonLinesHandler)]
    assert len(ours) == 1
    assert root.level == logging.WARNING
    logging.getLogger("memjobs.test").warning("once")
    assert first.getvalue() == ""
    assert [r["msg"] for r in lines(second)] == ["once"]


def test_configure_defaults_to_stderr(restore_logging: None, capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging()
    logging.getLogger("memjobs.test").info("to stderr")
    recs = [json.loads(x) for x in capsys.readouterr().err.splitlines() if x.startswith("{")]
    assert any(r["msg"] == "to stderr" for r in recs)


def test_configure_rejects_unknown_level(restore_logging: None) -> None:
    with pytest.raises(ValueError, match="unknown log level"):
        configure_logging(level="LOUD", stream=io.StringIO())


def test_formatter_never_raises() -> None:
    record = logging.LogRecord("memjobs.test", logging.INFO, __file__, 1, "%d items", ("x",), None)
    out = json.loads(JsonFormatter().format(record))
    assert out["msg"] == "log record could not be formatted"
    assert out["format_error"] == "TypeError"


def test_dramatiq_messages_in_log_arguments_lose_their_payload() -> None:
    import dramatiq

    from memjobs_worker.logs import JsonFormatter

    message: dramatiq.Message[Any] = dramatiq.Message(
        queue_name="q", actor_name="remember_source", args=({"text": "我对花生过敏"},), kwargs={}, options={}
    )
    record = logging.LogRecord(
        "dramatiq.worker.WorkerThread",
        logging.ERROR,
        __file__,
        1,
        "Failed to process message %s with unhandled exception.",
        (message,),
        None,
    )
    line = json.loads(JsonFormatter().format(record))
    assert line["msg"] == f"Failed to process message remember_source#{message.message_id} with unhandled exception."
    assert "花生" not in json.dumps(line, ensure_ascii=False)


# --- every line JSON: uncaught exceptions, warnings, the worker log file --------------


def test_uncaught_exceptions_in_threads_are_records_with_the_traceback_as_a_field(
    stream: io.StringIO,
) -> None:
    import threading

    threading.excepthook = threading.__excepthook__  # as a fresh process has it
    configure_logging(level="INFO", stream=stream)

    def boom() -> None:
        raise RuntimeError("worker thread failed")

    thread = threading.Thread(target=boom, name="doomed")
    thread.start()
    thread.join()
    record = only(stream)
    assert record["level"] == "CRITICAL" and record["exc_type"] == "RuntimeError"
    assert "Traceback" in record["exc"] and record["in_thread"] == "doomed"


def _pumped(tmp_path: Any, text: str, **limits: int) -> list[str]:
    import os

    from memjobs_worker.embedded.logpump import LogPump

    read_fd, write_fd = os.pipe()
    pump = LogPump(tmp_path / "worker.log", max_bytes=limits.get("max_bytes", 0), backups=limits.get("backups", 0))
    pump.pump(os.fdopen(read_fd, "rb"))
    with os.fdopen(write_fd, "wb") as out:
        out.write(text.encode())
    pump.close()
    return [line for p in sorted(tmp_path.glob("worker.log*")) for line in p.read_text().splitlines()]


def test_the_worker_log_wraps_plain_lines_and_tracebacks_into_json(tmp_path: Any) -> None:
    text = (
        '{"ts": "x", "level": "INFO", "logger": "memjobs", "msg": "already json"}\n'
        "[2026-11-30 10:00:00,000] [PID 7] [MainThread] [dramatiq.MainProcess] [INFO] Dramatiq booting\n"
        "Traceback (most recent call last):\n"
        '  File "x.py", line 1, in <module>\n'
        "OSError: [Errno 98] Address already in use\n"
        "a library printed this with api_key=sk-abcdefghijklmnopqrstuv\n"
    )
    records = [json.loads(line) for line in _pumped(tmp_path, text)]
    assert [r["msg"] for r in records][:2] == ["already json", "Dramatiq booting"]
    assert records[1]["logger"] == "dramatiq.MainProcess" and records[1]["pid"] == 7
    assert records[2]["level"] == "ERROR" and records[2]["msg"].startswith("OSError")
    assert records[2]["exc"].startswith("Traceback") and len(records) == 4
    assert "sk-abcdefghijklmnopqrstuv" not in records[3]["msg"]


def test_the_worker_log_rotates_by_size(tmp_path: Any) -> None:
    text = "".join(f"line {i} " + "x" * 100 + "\n" for i in range(200))
    lines_ = _pumped(tmp_path, text, max_bytes=4000, backups=3)
    files = sorted(p.name for p in tmp_path.glob("worker.log*"))
    assert files == ["worker.log", "worker.log.1", "worker.log.2", "worker.log.3"]
    assert all(p.stat().st_size <= 4000 for p in tmp_path.glob("worker.log*"))
    assert all(isinstance(json.loads(line), dict) for line in lines_)
