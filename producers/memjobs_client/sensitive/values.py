"""Does the text after a keyword look like a secret value?  Heuristics shared
by the disclosure rules.

Why: ordinary talk about passwords ("my password is wrong", "password:
<your password>", ``password = os.environ["PW"]``) must not be refused, so a
candidate value that is a stop word, a placeholder or a reference in code is
filler, not a secret.
"""

from __future__ import annotations

import re

_TRAILING_PUNCT = ".,!?;:)]}>"

# Words that follow "password is" / "password:" in ordinary talk about a
# password, not in a disclosure of one.  Also words that are variable names
# in code ("password = password").
_STOP_WORDS_TEXT = """
    wrong incorrect correct right expired expiring expire expires invalid valid
    weak strong stronger weaker secure insecure safe unsafe long longer short
    shorter simple complex complicated hard easy easier difficult tricky
    required needed necessary mandatory optional missing empty blank changed
    changing reset resetting updated saved stored hidden encrypted hashed
    protected same different new old fine good bad great okay there here gone
    lost forgotten forgot unknown secret private public compromised leaked
    stolen locked blocked working broken case sensitive insensitive what which
    that this these those something anything nothing everything someone
    somebody anyone everyone nobody somewhere somehow yesterday today tomorrow
    tonight mine yours ours theirs your their them they also still really very
    always never sometimes usually just only even actually probably maybe
    definitely written stuck useless annoying impossible ready done with from
    into over about like more less most least been being have having none null
    true false undefined default disabled enabled unset ignored revoked
    refreshed rotated renewed unchanged shared showing shown displayed visible
    obvious stupid dumb inside below above attached enclosed following similar
    please enter type provide provided supplied given sent send coming needs
    string bytes bool boolean integer number text varchar char object secretstr
    password passwords passwd passcode passphrase secrets token tokens
    credential credentials creds apikey api_key
"""
_STOP_WORDS = frozenset(_STOP_WORDS_TEXT.split())
# Stand-ins for a value: "****", "<password>", "${PW}", "[REDACTED]", "changeme" ...
PLACEHOLDER = re.compile(
    r"""
    \*{3,}.*|\*+|x{3,}|X{3,}|\.{3,}|…+|-+|_+|\?+
    |<.*|\[[^\]]*\]|\{[^}]*\}.*|\$\{.*|\$\(.*|\$[A-Za-z_][A-Za-z0-9_]*
    |%[A-Za-z_][A-Za-z0-9_]*%|%\([A-Za-z_]*\)s|\{\{.*
    |redacted|your[_\-]?\w+|changeme|placeholder|example|dummy|none|null|nil
    """,
    re.VERBOSE | re.IGNORECASE,
)
# A value that starts with a marker ("[REDACTED]&x=1" in a redacted URL).
_MARKER_FIRST = re.compile(r"\[[A-Za-z _\-]{3,20}\]")
# Code that reads a secret from somewhere rather than containing it:
# os.environ["X"], getpass(), settings.password, user_input ...
_CODE_REF = re.compile(
    r"[A-Za-z_$][\w$]*(?:\.[A-Za-z_$][\w$]*)+(?:[(\[].*)?"
    r"|[A-Za-z_$][\w$]*[(\[].*"
    r"|[a-z]+(?:_[a-z]+)+"
)
# A core that is a placeholder or code, or opens with a marker: one pattern
# (a step per value of a text of secrets).
_FILLER_CORE = re.compile(
    r"(?ix:" + PLACEHOLDER.pattern + r")\Z|(?:" + _CODE_REF.pattern + r")\Z|" + _MARKER_FIRST.pattern
)
# The first characters of an ASCII word of letters and digits that no
# alternative of _FILLER_CORE opens with: not a placeholder's (*, x, <, [, $, %,
# r of "redacted", y of "your_…", c, p, e, d, n), not "[", and such a word holds
# none of the ".", "(", "[", "_" each alternative of _CODE_REF needs. A secret
# ("hunter22", "abcd1234") is then known not to be filler without the pattern
# (2 µs a value, two rules a value in a text of secrets: issue 31).
_NO_FILLER_FIRST = frozenset("0123456789abfghijklmoqstuvwzABFGHIJKLMOQSTUVWZ")
# Particles and punctuation that end a clause ("密码是hunter啊", "... is swordfish.").
_CLAUSE_END = re.compile(
    r"[ \t]*(?:$|\n|[.,!?;:)\]}，。！？；：、…~]|[了啊呀哦吧啦哈喔嘛呢]"
    r"|(?:and|but|so|or|ok|okay|please|thanks|thank|remember|don't|dont|lol|haha)\b)",
    re.IGNORECASE,
)
# Characters that make a short word look like a password rather than a word.
SYMBOLS = frozenset("!@#$%^&*+=/\\|~_")


def value_core(value: str, quoted: bool) -> tuple[str, bool]:
    """The value without trailing punctuation, and whether some was removed."""
    if quoted:
        return value.strip(), True
    core = value.rstrip(_TRAILING_PUNCT)
    return core, core != value


def is_filler(core: str, raw: str) -> bool:
    """A stop word, a placeholder ("<password>", "${PW}", "[REDACTED]") or code,
    or a value that opens with a marker ("[REDACTED])": its core, "[REDACTED",
    was taken for a secret, and each redaction round added a "]")."""
    if core.lower() in _STOP_WORDS:
        return True
    if (
        not (core[:1] in _NO_FILLER_FIRST and core.isascii() and core.isalnum())
        and _FILLER_CORE.match(core) is not None
    ):
        return True
    if raw[:1] == "[" and _MARKER_FIRST.match(raw) is not None:
        return True
    stripped = raw.rstrip(".,;:!?")
    return (raw != core and PLACEHOLDER.fullmatch(raw) is not None) or (
        stripped != core and stripped != raw and PLACEHOLDER.fullmatch(stripped) is not None
    )


def value_span(value: re.Match[str], group: str) -> tuple[int, int]:
    """The span to redact: a plain value loses trailing ",.;:" (sentence
    punctuation, almost never part of a secret); "!" and "?" stay in."""
    start, end = value.span(group)
    if group == "plain":
        end = start + len(value.group(group).rstrip(".,;:)]}>"))
    return start, end


def at_clause_end(text: str, pos: int) -> bool:
    """Whether a clause ends at ``pos`` (end of text, punctuation, a particle, "and", ...)."""
    return _CLAUSE_END.match(text, pos) is not None


def digit_count(value: str) -> int:
    """How many digits ``value`` holds (``"12 34"`` has four)."""
    return sum(map(str.isdigit, value))
