"""Error messages a newcomer reads: each says the one thing that is wrong, in
the words of the interface they used."""

from __future__ import annotations

from pathlib import Path

import pytest

from memjobs_client.client import MemjobsClient
from memjobs_client.errors import InvalidPayload
from memjobs_worker.cli import exits
from tests.support.cli import (
    cli_env,
    run_cli,
)

pytestmark = pytest.mark.slow  # the memjobs command line, run as processes


def test_a_turn_without_ts_is_one_complaint_about_ts() -> None:
    client = MemjobsClient("redis://127.0.0.1:1/0")  # refused before Redis is needed
    with pytest.raises(InvalidPayload) as refused:
        client.end_session("owner", "s-1", [{"role": "user", "text": "call me Lin"}])
    message = str(refused.value)
    assert "transcript.0.ts" in message
    assert "at least 1 item" not in message, message  # not a second, confusing complaint
    with pytest.raises(InvalidPayload, match="at least 1 item"):
        client.end_session("owner", "s-1", [])  # an empty transcript still says so


def test_both_missing_urls_are_unset_in_plural(tmp_path: Path) -> None:
    result = run_cli(cli_env(tmp_path / "fresh"), "status")
    assert result.code == exits.CONFIG
    assert "MEMJOBS_REDIS_URL and MEMJOBS_DATABASE_URL are unset" in result.stderr
    one = run_cli(cli_env(tmp_path / "fresh", MEMJOBS_REDIS_URL="redis://127.0.0.1:1/0"), "status")
    assert "MEMJOBS_DATABASE_URL is unset" in one.stderr


def test_reindex_without_consent_names_the_flag(tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("tea")
    result = run_cli(cli_env(tmp_path / "fresh"), "reindex", "--owner", "o", "--path", str(notes))
    assert result.code == exits.REFUSED, result
    assert "--consent" in result.stderr and "consent=True" not in result.stderr
