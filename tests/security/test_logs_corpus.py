"""Logs redact by value: every credential of the corpus, logged every way a
library or an exception could log it, is absent from the JSON Lines output."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from typing import Any

from tests.support.sensitive_corpus import negatives, positives

log = logging.getLogger("memjobs.test.corpus")


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _written(stream: io.StringIO) -> str:
    """Every string the log wrote, decoded from its JSON (escapes undone)."""
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    return "\n".join(s for line in lines for s in _strings(line))


def _log_every_way(text: str) -> None:
    log.info(text)
    log.warning("could not handle %s", text)
    log.info("request", extra={"note": text, "details": {"items": [text], "count": 1}})
    try:
        raise ValueError(f"bad value: {text}")
    except ValueError:
        log.exception("failed")


def test_no_credential_of_the_corpus_survives_the_logging_path(stream: io.StringIO) -> None:
    rows = positives()
    for _, _, text in rows:
        _log_every_way(text)
    written = _written(stream)
    leaked = [(family, secret) for family, secret, _ in rows if secret in written]
    assert leaked == []
    assert written.count("failed") == len(rows)  # every record was written


def test_ordinary_lines_are_logged_as_they_are(stream: io.StringIO) -> None:
    lines = negatives()
    for line in lines:
        log.info(line)
    written = _written(stream)
    kept = [line for line in lines if line in written]
    assert len(kept) >= 0.98 * len(lines)
