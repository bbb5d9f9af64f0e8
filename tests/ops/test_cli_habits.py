"""The habits people expect of a command line, none of which needs a server:
``--version``, help on a bare ``memjobs``, help text on every option, ``-``
for stdin where a file is read, no traceback when the reader closes the pipe,
and tables aligned by what a terminal shows (CJK and emoji take two columns).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from wcwidth import wcswidth

from memjobs_worker.cli import dead_commands, exits
from memjobs_worker.cli.main import build_parser
from memjobs_worker.cli.output import table
from tests.support.cli import cli_env, run_cli, run_cli_into_closed_pipe


def parsers(parser: argparse.ArgumentParser, path: str = "memjobs") -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every parser under ``parser``: the top level, each command, each command's actions."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from parsers(sub, f"{path} {name}")


def test_every_option_and_argument_has_help() -> None:
    missing = []
    for path, parser in parsers(build_parser()):
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
                continue
            if not (action.help or "").strip():
                missing.append(f"{path} {'/'.join(action.option_strings) or action.dest}")
    assert missing == [], "options without help text:\n" + "\n".join(missing)


def test_the_walk_reaches_every_command() -> None:
    """The test above would pass on an empty walk: it reaches nested actions too."""
    names = {path for path, _ in parsers(build_parser())}
    assert {"memjobs remember", "memjobs dead list", "memjobs dead purge", "memjobs up"} <= names


def test_version(tmp_path: Path) -> None:
    result = run_cli(cli_env(tmp_path / "data"), "--version")
    assert result.code == exits.OK, str(result)
    assert result.stdout.startswith("memjobs ") and result.stdout.split()[1][0].isdigit(), str(result)
    assert result.stderr == ""


def test_a_bare_memjobs_prints_the_help_not_an_error(tmp_path: Path) -> None:
    result = run_cli(cli_env(tmp_path / "data"))
    assert result.code == exits.OK, str(result)
    assert result.stdout.startswith("usage: memjobs") and "remember" in result.stdout
    assert result.stderr == ""


@pytest.mark.parametrize("args", [("--help",), ("config",), ("remember", "--help")], ids=lambda args: " ".join(args))
def test_a_closed_pipe_ends_the_command_without_a_traceback(tmp_path: Path, args: tuple[str, ...]) -> None:
    """The reader is gone before the first line is written (``| head -1`` once it
    has read its line): one EPIPE, and nothing on stderr about it."""
    done = run_cli_into_closed_pipe(cli_env(tmp_path / "data"), *args)
    # argparse's help swallows the failed write itself (exit 0); the commands' output is 141
    assert done.code == (exits.OK if "--help" in args else exits.CLOSED_PIPE), done.stderr
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr
    assert done.stderr == ""


def test_a_table_aligns_chinese_and_emoji_by_display_width() -> None:
    rows = [
        {"text": "我叫小林，住在杭州", "state": "learned"},
        {"text": "tea 🍵 every morning", "state": "pending"},
        {"text": "plain", "state": "failed"},
    ]
    lines = table(rows, ["text", "state"]).splitlines()
    starts = {
        wcswidth(line[: line.index(state)])
        for line, state in zip(lines, ["state", "learned", "pending", "failed"], strict=True)
    }
    assert len(starts) == 1, "\n" + "\n".join(lines)


def test_a_long_chinese_cell_is_cut_to_the_column_budget() -> None:
    line = table([{"text": "花生" * 100}], ["text"]).splitlines()[1]
    assert line.endswith("…") and wcswidth(line) <= 60


def transcript_env(tmp_path: Path) -> dict[str, str]:
    # Nothing listens: a transcript that was read goes as far as Redis (exit 5).
    return cli_env(
        tmp_path / "data",
        MEMJOBS_REDIS_URL="redis://127.0.0.1:1/0",
        MEMJOBS_DATABASE_URL="postgresql://postgres@127.0.0.1:1/postgres",
    )


TURNS = [{"role": "user", "text": "call me Lin", "ts": "2026-11-29T10:00:00Z"}]


#: ``memjobs end-session`` for owner a and session s1, up to the transcript it reads.
END_SESSION = ("end-session", "--owner", "a", "--session", "s1", "--transcript")


def test_end_session_reads_the_transcript_from_stdin(tmp_path: Path) -> None:
    result = run_cli(transcript_env(tmp_path), *END_SESSION, "-", stdin=json.dumps(TURNS))
    assert result.code == exits.UNAVAILABLE, str(result)  # read, validated, then Redis did not answer
    assert "transcript" not in result.stderr, str(result)


def test_end_session_takes_inline_json(tmp_path: Path) -> None:
    tasks = '[{"task_id": "t1", "goal": "tea"}]'
    result = run_cli(transcript_env(tmp_path), *END_SESSION, json.dumps(TURNS), "--tasks", tasks)
    assert result.code == exits.UNAVAILABLE, str(result)


def test_end_session_says_which_transcript_it_could_not_read(tmp_path: Path) -> None:
    result = run_cli(transcript_env(tmp_path), *END_SESSION, str(tmp_path / "missing.json"))
    assert result.code == exits.REFUSED, str(result)
    assert "missing.json" in result.stderr and "Traceback" not in result.stderr


LISTINGS = ("sources", "memories", "sessions", "knowledge", "audit", "dead list")


def test_every_listing_takes_a_limit() -> None:
    found = {
        path.removeprefix("memjobs "): {o for a in parser._actions for o in a.option_strings}
        for path, parser in parsers(build_parser())
    }
    assert [name for name in LISTINGS if "--limit" not in found[name]] == []


class Letter:
    def __init__(self, n: int) -> None:
        self.n = n

    def as_dict(self) -> dict[str, object]:
        return {
            "message_id": f"msg-{self.n}",
            "queue": "memjobs_extract",
            "actor": "extract_facts",
            "reason": "model_unavailable",
            "attempts": 3,
            "owner": "0123456789ab",
            "first_failed_at": "2026-12-04T10:00:00+00:00",
            "last_failed_at": "2026-12-04T10:01:00+00:00",
        }


class Letters:
    def letters(self, queue: str | None = None) -> list[Letter]:
        return [Letter(n) for n in range(5)]


def test_dead_list_limit_shows_the_first_n_and_says_how_many_were_left_out(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = build_parser(["dead", "list"]).parse_args(["dead", "list", "--limit", "2"])
    assert dead_commands._list(Letters(), args) == exits.OK  # type: ignore[arg-type]
    out, err = capsys.readouterr()
    assert [line.split()[0] for line in out.splitlines()] == ["message_id", "msg-0", "msg-1", "2"]
    assert "showing 2 of 5 dead letters" in err


def test_a_page_with_more_behind_it_says_so_without_a_total(capsys: pytest.CaptureFixture[str]) -> None:
    from argparse import Namespace

    from memjobs_worker.cli.options import limited

    assert limited([1, 2, 3], Namespace(limit=2), "sources", more=True) == [1, 2]
    assert "showing the first 2 sources; there are more" in capsys.readouterr().err
    assert limited([1, 2], Namespace(limit=2), "sources") == [1, 2]
    assert capsys.readouterr().err == ""
