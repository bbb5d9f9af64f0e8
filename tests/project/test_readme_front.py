"""The README's front door (issue 33): what a user gets comes first, in plain
words; then the two commands; the curl example recalls only once the source is
learned (a recall right after remember finds nothing); the TypeScript client's
install is said."""

from __future__ import annotations

from tests.project.test_readme import COMMAND_LANGUAGES, README, _code_blocks

#: Words of the inside that a first paragraph should not need.
INTERNAL = ("fenced", "fencing", "grounding", "debounce", "lease", "provenance", "ledger")


def opening() -> str:
    text = README.read_text(encoding="utf-8")
    return text[: text.index("## Quick start")]


def test_the_opening_says_what_a_user_gets_without_internal_vocabulary() -> None:
    words = opening().lower()
    assert [w for w in INTERNAL if w in words] == []
    assert all(w in words for w in ("remember", "recall", "forget")), "what it does, first"


def test_the_quick_start_names_the_two_commands_first() -> None:
    text = README.read_text(encoding="utf-8")
    start = text[text.index("## Quick start") :]
    first_block = next(body for language, body in _code_blocks(start) if language in COMMAND_LANGUAGES)
    assert [line.split()[1] for line in first_block.splitlines()[:2]] == ["demo", "test"]


def test_the_curl_example_waits_for_the_source_to_be_learned_before_recalling() -> None:
    block = next(
        body
        for language, body in _code_blocks(README.read_text(encoding="utf-8"))
        if language in COMMAND_LANGUAGES and "/v1/recall" in body and "curl" in body
    )
    lines = [line for line in block.splitlines() if not line.lstrip().startswith("#")]
    remember = next(i for i, line in enumerate(lines) if "/v1/remember" in line)
    recall = next(i for i, line in enumerate(lines) if "/v1/recall" in line)
    waits = [
        i
        for i, line in enumerate(lines)
        if "/v1/sources" in line and "learned" in line and line.startswith(("until ", "while "))
    ]
    assert waits and remember < waits[0] < recall, block


def test_the_typescript_clients_install_is_said() -> None:
    text = README.read_text(encoding="utf-8")
    assert "npm install" in text and "clients/typescript" in text[text.index("npm install") - 200 :]
