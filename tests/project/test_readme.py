"""The README's and the docs' promises that can be checked without a server:
every setting in the configuration table of docs/configuration.md, a README
short enough to be a front door, relative links that lead somewhere, and the
commands the README names (make targets, `memjobs` subcommands and their
options, settings) real ones."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

from memjobs_worker.settings import setting_keys


def _repository() -> Path:
    for folder in Path(__file__).resolve().parents:
        if (folder / "Makefile").is_file() and (folder / "README.md").is_file():
            return folder
    raise AssertionError(f"no repository root above {__file__}")


REPO = _repository()
README = REPO / "README.md"
DOCS = REPO / "docs"
MAX_README_LINES = 400
SETTING_NAME = re.compile(r"\b(?:MEMJOBS|QWEN_AUDIO|DASHSCOPE|NOVA_AUDIO)_[A-Z0-9_]*[A-Z0-9]\b")


def _pages() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def _name(page: Path) -> str:
    return page.relative_to(REPO).as_posix()


def _read(page: Path) -> str:
    return page.read_text(encoding="utf-8")


def _section(text: str, title: str) -> str:
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:] if end < 0 else text[start:end]


FENCE = re.compile(r"^(```+|~~~+)([^\n]*)\n(.*?)^\1[ \t]*$", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"(`+)(.+?)\1", re.DOTALL)


def _code_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced code block."""
    return [(match.group(2).strip().lower(), match.group(3)) for match in FENCE.finditer(text)]


def _inline_code(text: str) -> list[str]:
    return [match.group(2) for match in INLINE_CODE.finditer(FENCE.sub("\n", text))]


def env_names() -> dict[str, str]:
    """Every setting (``section.field``) and the environment variable that sets it."""
    return setting_keys()


def every_env_name() -> set[str]:
    """Every environment variable a setting is read from."""
    return set(env_names().values())


# --- the configuration table -------------------------------------------------


def test_every_setting_is_in_the_configuration_table() -> None:
    text = _read(DOCS / "configuration.md")
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    documented = {name for row in rows for name in re.findall(r"`([A-Z][A-Z0-9_]+)`", row.split("|")[1])}
    missing = sorted(env for env in env_names().values() if env not in documented)
    assert missing == [], f"settings missing from the configuration table of docs/configuration.md: {missing}"


def test_the_configuration_tables_name_only_settings() -> None:
    known = every_env_name()
    configuration = DOCS / "configuration.md"
    tables = {README: _section(_read(README), "Configuration"), configuration: _read(configuration)}
    for page, text in tables.items():
        rows = [line for line in text.splitlines() if line.startswith("| `")]
        named = {name for row in rows for name in re.findall(r"`([A-Z][A-Z0-9_]+)`", row.split("|")[1])}
        assert named and named <= known, f"{_name(page)}: not settings: {sorted(named - known)}"


def test_the_readme_names_only_real_settings() -> None:
    unknown = sorted(set(SETTING_NAME.findall(_read(README))) - every_env_name())
    assert unknown == [], f"README.md names environment variables memjobs does not read: {unknown}"


# --- a front door --------------------------------------------------------------


def test_the_readme_is_a_front_door() -> None:
    lines = _read(README).count("\n")
    assert lines <= MAX_README_LINES, (
        f"README.md has {lines} lines (at most {MAX_README_LINES}): move reference material into docs/"
    )


def test_the_readme_stays_in_the_repository_and_links_the_design() -> None:
    text = _read(README)
    assert "../shared" not in text
    assert "](docs/DESIGN.md)" in text and (DOCS / "DESIGN.md").exists()


def test_the_readme_links_every_docs_page() -> None:
    text = _read(README)
    pages = sorted(
        page.relative_to(REPO).as_posix()
        for page in DOCS.iterdir()
        if page.is_file() and page.suffix in {".md", ".json"}
    )
    missing = [page for page in pages if f"]({page})" not in text]
    assert missing == [], f"docs pages the README does not link: {missing}"


def test_every_docs_page_leads_back_to_the_readme() -> None:
    missing = [
        _name(page)
        for page in sorted(DOCS.glob("*.md"))
        if page.name != "DESIGN.md" and "](../README.md)" not in _read(page)
    ]
    assert missing == [], f"docs pages with no link back to README.md: {missing}"


# --- links ----------------------------------------------------------------------

LINK = re.compile(r"!?\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = text.strip().lower().replace("`", "")
    text = "".join(char for char in text if char.isalnum() or char in " -_")
    return text.replace(" ", "-")


@cache
def _anchors(page: Path) -> frozenset[str]:
    seen: dict[str, int] = {}
    anchors = set()
    for match in re.finditer(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", FENCE.sub("\n", _read(page)), re.MULTILINE):
        slug = _slug(match.group(1))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return frozenset(anchors)


def _broken_links(page: Path) -> list[str]:
    broken = []
    for target in LINK.findall(FENCE.sub("\n", _read(page))):
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):
            continue  # https:, mailto:: not a file of the repository
        path_part, _, anchor = target.partition("#")
        resolved = (page.parent / path_part).resolve() if path_part else page
        if not resolved.is_relative_to(REPO):
            broken.append(f"{target} (outside the repository)")
        elif not resolved.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
            broken.append(f"{target} (no such heading in {_name(resolved)})")
    return broken


@pytest.mark.parametrize("page", _pages(), ids=_name)
def test_relative_links_lead_to_files_of_the_repository(page: Path) -> None:
    broken = _broken_links(page)
    assert broken == [], f"{_name(page)}: broken links: {broken}"


# --- commands -------------------------------------------------------------------


def _make_targets() -> set[str]:
    makefile = _read(REPO / "Makefile")
    targets = {
        name for line in re.findall(r"^([^\s#=:$.][^:=]*?)\s*::?(?!=)", makefile, re.MULTILINE) for name in line.split()
    }
    return targets


def _named_make_targets(text: str) -> set[str]:
    code = [body for _, body in _code_blocks(text)] + _inline_code(text)
    return {
        target
        for snippet in code
        for target in re.findall(r"(?:^|[\s;&|(])make[ \t]+([A-Za-z0-9_.-]+)", snippet, re.MULTILINE)
        if not target.startswith("-")
    }


@pytest.mark.parametrize("page", [README, DOCS / "development.md"], ids=_name)
def test_every_make_target_named_is_in_the_makefile(page: Path) -> None:
    named = _named_make_targets(_read(page))
    assert named, f"{_name(page)} names no make target: the parser is broken"
    missing = sorted(named - _make_targets())
    assert missing == [], f"{_name(page)} names make targets the Makefile does not have: {missing}"


def _memjobs() -> Path:
    for folder in (Path(sys.executable).parent, REPO / ".venv" / "bin"):
        if (folder / "memjobs").exists():
            return folder / "memjobs"
    pytest.fail("the memjobs command is not installed beside this Python (make test installs it)")


@cache
def _subcommands() -> frozenset[str]:
    """The CLI's subcommands, read from `memjobs --help` (argparse lists each
    one indented by four spaces under its positional arguments)."""
    answer = subprocess.run([str(_memjobs()), "--help"], capture_output=True, text=True, timeout=120, check=False)
    assert answer.returncode == 0, f"memjobs --help failed ({answer.returncode}):\n{answer.stderr[-2000:]}"
    listing = answer.stdout.split("positional arguments:", 1)[-1].split("\noptions:", 1)[0]
    commands = frozenset(re.findall(r"^    ([a-z][a-z0-9-]*)(?:\s|$)", listing, re.MULTILINE))
    assert {"up", "remember", "forget"} <= commands, f"could not read the subcommands from:\n{answer.stdout}"
    return commands


COMMAND_LANGUAGES = {"sh", "bash", "shell", "console", "zsh"}


def _readme_commands() -> list[list[str]]:
    """Every `memjobs …` command line of the README's shell blocks and inline
    code, as words (comments and the output after `# →` dropped)."""
    text = _read(README)
    snippets = [
        line for language, body in _code_blocks(text) if language in COMMAND_LANGUAGES for line in body.splitlines()
    ]
    snippets += [code for code in _inline_code(text) if code.startswith("memjobs ")]
    commands = []
    for snippet in snippets:
        snippet = re.sub(r"(^|\s)#.*$", "", snippet).strip()
        for part in re.split(r"&&|\|\||[;|]|\$\(", snippet):
            words = part.split()
            while words and words[0] in {"$", "sudo", "exec", "time"}:
                words = words[1:]
            if words and words[0].endswith("memjobs") and words[0].split("/")[-1] == "memjobs":
                commands.append(words)
    return commands


def test_every_memjobs_subcommand_in_the_readme_is_real() -> None:
    commands = _readme_commands()
    assert len(commands) >= 5, "found almost no memjobs command in README.md: the parser is broken"
    named = {words[1] for words in commands if len(words) > 1 and re.fullmatch(r"[a-z][a-z0-9-]*", words[1])}
    unknown = sorted(named - _subcommands())
    assert unknown == [], f"README.md names memjobs subcommands the CLI does not have: {unknown}"


HELP_SCRIPT = """
import contextlib, io, json, sys
from importlib.metadata import entry_points
(main,) = [point.load() for point in entry_points(group="console_scripts", name="memjobs")]
answers = {}
for command in sys.argv[1:]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        main([command, "--help"])
    answers[command] = out.getvalue()
print(json.dumps(answers))
"""


def test_the_readme_uses_only_options_the_cli_has() -> None:
    """Each `memjobs COMMAND [ACTION] --option` of the README: the option and
    the action are in `memjobs COMMAND --help` (read in one subprocess through
    the `memjobs` entry point, not the CLI's modules)."""
    commands = [words for words in _readme_commands() if len(words) > 1 and words[1] in _subcommands()]
    used = sorted({words[1] for words in commands})
    answer = subprocess.run(
        [sys.executable, "-c", HELP_SCRIPT, *used], capture_output=True, text=True, timeout=300, check=False, cwd=REPO
    )
    assert answer.returncode == 0, f"memjobs COMMAND --help failed:\n{answer.stderr[-2000:]}"
    helps: dict[str, str] = json.loads(answer.stdout)
    wrong = []
    for words in commands:
        help_text = helps[words[1]]
        options = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", help_text))
        wrong += [
            f"{' '.join(words)}: {word}"
            for word in words[2:]
            if word.startswith("--") and word.split("=")[0] not in options
        ]
        choices = re.search(r"^positional arguments:\n  \{([^}]*)\}", help_text, re.MULTILINE)
        action = words[2] if len(words) > 2 and not words[2].startswith("-") else None
        if choices and action is not None and action not in choices.group(1).split(","):
            wrong.append(f"{' '.join(words)}: {action} is not one of {{{choices.group(1)}}}")
    assert wrong == [], f"README.md uses what the CLI does not have: {wrong}"


# --- files named ------------------------------------------------------------------

REPOSITORY_PATH = re.compile(r"(?<![\w./~-])((?:tests|bench|workers|producers|deploy|clients|docs)/[\w./-]*)")


@pytest.mark.parametrize("page", _pages(), ids=_name)
def test_every_file_named_in_code_is_in_the_repository(page: Path) -> None:
    """A path such as `tests/memory/test_pipeline.py` or `bench/bench_load.py`
    in inline code names a file or folder that exists (files move; their
    mentions must follow)."""
    named = {
        match.rstrip(".,;:")
        for code in _inline_code(_read(page))
        if not re.search(r"[<>*…{}]", code)
        for match in REPOSITORY_PATH.findall(code)
    }
    missing = sorted(path for path in named if not (REPO / path).exists())
    assert missing == [], f"{_name(page)} names files that are not in the repository: {missing}"
