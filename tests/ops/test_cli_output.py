"""The command line's output for people (no ``--json``): lines and tables,
never Python's reprs (``source_id: None``, ``skipped: []``, ``{}``), never a
payload model's class name, never a JSON document where a table belongs.

Against the test session's Redis and PostgreSQL (configured URLs, no worker:
what is queued stays queued).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from memjobs_worker.cli import exits
from memjobs_worker.cli.output import emit, table
from tests.support.cli import SECRET, TEA, cli_env, new_owner, run_cli

REPRS = re.compile(r"\bNone\b|\[\]|\{\}|\bTrue\b|\bFalse\b|[A-Z][a-z]+[A-Z][A-Za-z]+\b")


def env_for(tmp_path: Path, redis_url: str, database_url: str) -> dict[str, str]:
    return cli_env(
        tmp_path / "data",
        MEMJOBS_REDIS_URL=redis_url,
        MEMJOBS_DATABASE_URL=database_url,
        MEMJOBS_KNOWLEDGE_ROOTS=str(tmp_path),
    )


def no_reprs(text: str) -> None:
    assert REPRS.search(text) is None, text


def test_remember_says_what_it_queued(tmp_path: Path, redis_url: str, database_url: str) -> None:
    result = run_cli(env_for(tmp_path, redis_url, database_url), "remember", "--owner", new_owner("out"), "--text", TEA)
    assert result.code == exits.OK, str(result)
    assert re.fullmatch(r"queued src_[0-9a-f]{32}\n", result.stdout), result.stdout
    no_reprs(result.stdout + result.stderr)


@pytest.mark.parametrize(("text", "said"), [(SECRET, "refused (sensitive_content)"), ("", "--text")])
def test_a_refused_remember_is_one_line_without_reprs_or_class_names(
    tmp_path: Path, redis_url: str, database_url: str, text: str, said: str
) -> None:
    result = run_cli(
        env_for(tmp_path, redis_url, database_url), "remember", "--owner", new_owner("out"), "--text", text
    )
    assert result.code == exits.REFUSED, str(result)
    assert result.stdout == "" and said in result.stderr, str(result)
    assert "RememberSource" not in result.stderr
    no_reprs(result.stderr)
    assert len(result.stderr.strip().splitlines()) == 1


def test_forget_of_an_unknown_source_says_not_found(tmp_path: Path, redis_url: str, database_url: str) -> None:
    result = run_cli(
        env_for(tmp_path, redis_url, database_url), "forget", "--owner", new_owner("out"), "--source", "src_" + "0" * 32
    )
    assert result.code == exits.NOT_FOUND, str(result)
    assert "not found" in result.stderr
    no_reprs(result.stdout + result.stderr)


def test_memory_read_of_an_empty_document_says_it_is_empty(tmp_path: Path, redis_url: str, database_url: str) -> None:
    result = run_cli(
        env_for(tmp_path, redis_url, database_url), "memory", "read", "--owner", new_owner("out"), "--doc", "USER.md"
    )
    assert result.code == exits.OK, str(result)
    assert "USER.md" in result.stdout and "empty" in result.stdout, result.stdout
    assert "USER.md  0" not in result.stdout


def test_reindex_says_what_it_queued_without_empty_lists(tmp_path: Path, redis_url: str, database_url: str) -> None:
    (tmp_path / "tea.md").write_text("Oolong tea is half oxidised.")
    result = run_cli(
        env_for(tmp_path, redis_url, database_url),
        "reindex",
        "--owner",
        new_owner("out"),
        "--path",
        str(tmp_path / "tea.md"),
        "--consent",
    )
    assert result.code == exits.OK, str(result)
    assert result.stdout.startswith("queued 1 documents"), result.stdout
    assert "skipped" not in result.stdout
    no_reprs(result.stdout)


def test_knowledge_search_prints_no_json(tmp_path: Path, redis_url: str, database_url: str) -> None:
    result = run_cli(
        env_for(tmp_path, redis_url, database_url),
        "knowledge",
        "search",
        "--owner",
        new_owner("out"),
        "--query",
        "oolong",
    )
    assert result.code == exits.OK, str(result)
    assert not result.stdout.lstrip().startswith(("{", "[")) and "results:" not in result.stdout
    assert result.stdout.startswith("no results"), result.stdout
    no_reprs(result.stdout)


def test_a_listing_is_a_table_with_a_header(capsys: pytest.CaptureFixture[str]) -> None:
    rows = [
        {"score": 0.91234, "title": "Tea notes", "text": "Oolong tea\nis half oxidised.", "trust": None},
        {"score": 0.5, "title": "Coffee", "text": "x" * 200, "trust": "untrusted_external"},
    ]
    lines = table(rows, ["score", "title", "trust", "text"]).splitlines()
    assert lines[0].split() == ["score", "title", "trust", "text"]
    assert lines[1].split()[:2] == ["0.912", "Tea"] and "Oolong tea is half oxidised." in lines[1]
    assert len({line.index("title") if "title" in line else lines[0].index("title") for line in lines}) == 1
    assert len(lines[2]) < 120 and lines[2].endswith("…")
    emit({"source_id": None, "status": "queued", "skipped": [], "counts": {}}, as_json=False)
    assert capsys.readouterr().out == "status: queued\n"
