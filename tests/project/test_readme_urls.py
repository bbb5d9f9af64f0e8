"""The README's shell examples read the stack's addresses; they never assume a
port (on a shared machine the default one may be someone else's stack)."""

from __future__ import annotations

import re

from tests.project.test_readme import COMMAND_LANGUAGES, README, _code_blocks

LOCAL_URL = re.compile(r"https?://(?:127\.0\.0\.1|localhost|\[::1\]):\d+")


def test_no_shell_example_talks_to_a_hard_coded_local_port() -> None:
    lines = [
        line
        for language, body in _code_blocks(README.read_text(encoding="utf-8"))
        if language in COMMAND_LANGUAGES
        for line in body.splitlines()
    ]
    used = [line for line in lines if LOCAL_URL.search(re.sub(r"(^|\s)#.*$", "", line))]  # a comment may show a banner
    assert used == [], used
    assert any("$(memjobs url)" in line for line in lines), "the curl block reads the API's URL"
