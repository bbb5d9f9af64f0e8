"""Refuse content and paths that look like credentials, before they go anywhere.

What: one check shared by every ingest path (``remember``, knowledge import,
consolidation input and output).  :func:`find_sensitive_text` and
:func:`find_sensitive_path` say which rule matched, :func:`ensure_not_sensitive`
raises :class:`~producers.errors.SensitiveContent` (reason
``sensitive_content``), and :func:`redact_secrets` blanks the secret values out
of text that must still reach a model.

Why: a voice assistant hears people read out Wi-Fi passwords, bank PINs and API
keys, in Chinese and in English.  None of that may be stored in memory or sent
to a model service, so the check runs at the producer, before anything is
queued.  The gateway imports ``producers/`` alone, so this module uses the
standard library only.

How, and what it will not do:

* Text is normalised with NFKC one character at a time (so full-width
  ``ｐａｓｓｗｏｒｄ：`` matches, and offsets still map back to the original for
  redaction) and invisible format characters such as zero-width spaces are
  dropped.
* Token *shapes* (PEM blocks, AWS, GitHub, Slack, ``sk-`` keys, JWTs, ...) are
  matched anywhere.  *Disclosures* ("my password is hunter2", "密码是123456")
  need a keyword, a connector (``is``, ``:``, ``=``, 是, 为, 设置成, ...) and a
  value that looks like one: ordinary talk about passwords ("I forgot my
  password yesterday", "我忘记密码了") is not flagged.  This is a heuristic:
  it trades a few misses for few false refusals.
* A :class:`Finding` and every error message name the rule only, never the
  matched text, because the matched text is the secret.
"""

from __future__ import annotations

import bisect
import math
import re
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from producers.errors import SensitiveContent

__all__ = [
    "REDACTED",
    "Finding",
    "ensure_not_sensitive",
    "find_sensitive_path",
    "find_sensitive_text",
    "redact_secrets",
]

REDACTED = "[REDACTED]"
"""What :func:`redact_secrets` puts in place of each secret value."""

PATH_RULE = "credential_path"
"""The rule id of every :func:`find_sensitive_path` match on the path's shape."""


@dataclass(frozen=True)
class Finding:
    """Which rule matched.  Never carries the matched text: that is the secret."""

    rule: str
    description: str = ""

    def __str__(self) -> str:
        return f"{self.rule} ({self.description})" if self.description else self.rule


# --------------------------------------------------------------------------
# Normalisation with an offset map back to the original text
# --------------------------------------------------------------------------

# Unicode general category Cf (format characters: zero-width space and joiners,
# bidi controls, soft hyphen, BOM, tag characters, ...).  They are invisible,
# so they are dropped before matching: "pass\u200bword" is "password".
_FORMAT_CHARS = re.compile(
    "[\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e"
    "\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb"
    "\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3"
    "\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f]"
)
_RUNS = re.compile(r"[\x00-\x7f]+|[^\x00-\x7f]+")


@dataclass(frozen=True)
class _Segment:
    norm_start: int
    orig_start: int
    orig_len: int
    identity: bool  # True: character i of the segment maps to character i


@dataclass(frozen=True)
class _Normalised:
    text: str
    segments: tuple[_Segment, ...]
    starts: tuple[int, ...]  # norm_start of each segment, for bisect

    def orig_span(self, start: int, end: int) -> tuple[int, int]:
        """Map a non-empty span of the normalised text back to the original."""
        seg = self.segments[bisect.bisect_right(self.starts, start) - 1]
        o_start = seg.orig_start + (start - seg.norm_start if seg.identity else 0)
        last = end - 1
        seg = self.segments[bisect.bisect_right(self.starts, last) - 1]
        if seg.identity:
            o_end = seg.orig_start + (last - seg.norm_start) + 1
        else:
            o_end = seg.orig_start + seg.orig_len
        return o_start, o_end


def _normalise(text: str) -> _Normalised:
    """NFKC character by character, dropping format characters, with an offset map."""
    pieces: list[str] = []
    segments: list[_Segment] = []
    norm_len = 0

    def add(piece: str, orig_start: int, orig_len: int, identity: bool) -> None:
        nonlocal norm_len
        if not piece:
            return
        pieces.append(piece)
        segments.append(_Segment(norm_len, orig_start, orig_len, identity))
        norm_len += len(piece)

    for run in _RUNS.finditer(text):
        chunk = run.group()
        if chunk.isascii() or (
            unicodedata.is_normalized("NFKC", chunk) and not _FORMAT_CHARS.search(chunk)
        ):
            add(chunk, run.start(), len(chunk), True)
            continue
        for offset, char in enumerate(chunk):
            if _FORMAT_CHARS.match(char):
                continue
            piece = unicodedata.normalize("NFKC", char)
            add(piece, run.start() + offset, 1, piece == char)
    segs = tuple(segments)
    return _Normalised("".join(pieces), segs, tuple(s.norm_start for s in segs))


def _nfkc(text: str) -> str:
    return _normalise(text).text


# --------------------------------------------------------------------------
# Value heuristics shared by the disclosure rules
# --------------------------------------------------------------------------

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
_PLACEHOLDER = re.compile(
    r"""
    \*{3,}.*|\*+|x{3,}|X{3,}|\.{3,}|…+|-+|_+|\?+
    |<.*|\[[^\]]*\]|\{[^}]*\}.*|\$\{.*|\$\(.*|\$[A-Za-z_][A-Za-z0-9_]*
    |%[A-Za-z_][A-Za-z0-9_]*%|%\([A-Za-z_]*\)s|\{\{.*
    |redacted|your[_\-]?\w+|changeme|placeholder|example|dummy|none|null|nil
    """,
    re.VERBOSE | re.IGNORECASE,
)
# Code that reads a secret from somewhere rather than containing it:
# os.environ["X"], getpass(), settings.password, user_input ...
_CODE_REF = re.compile(
    r"[A-Za-z_$][\w$]*(?:\.[A-Za-z_$][\w$]*)+(?:[(\[].*)?"
    r"|[A-Za-z_$][\w$]*[(\[].*"
    r"|[a-z]+(?:_[a-z]+)+"
)
# Particles and punctuation that end a clause ("密码是hunter啊", "... is swordfish.").
_CLAUSE_END = re.compile(
    r"[ \t]*(?:$|\n|[.,!?;:)\]}，。！？；：、…~]|[了啊呀哦吧啦哈喔嘛呢]"
    r"|(?:and|but|so|or|ok|okay|please|thanks|thank|remember|don't|dont|lol|haha)\b)",
    re.IGNORECASE,
)
_SYMBOLS = frozenset("!@#$%^&*+=/\\|~_")


def _core(value: str, quoted: bool) -> tuple[str, bool]:
    """The value without trailing punctuation, and whether some was removed."""
    if quoted:
        return value.strip(), True
    core = value.rstrip(_TRAILING_PUNCT)
    return core, core != value


def _is_filler(core: str, raw: str) -> bool:
    """A stop word, a placeholder ("<password>", "${PW}", "[REDACTED]") or code."""
    return (
        core.lower() in _STOP_WORDS
        or _PLACEHOLDER.fullmatch(core) is not None
        or _PLACEHOLDER.fullmatch(raw) is not None
        or _PLACEHOLDER.fullmatch(raw.rstrip(".,;:!?")) is not None
        or _CODE_REF.fullmatch(core) is not None
    )


def _value_span(value: re.Match[str], group: str) -> tuple[int, int]:
    """The span to redact: a plain value loses trailing ",.;:" (sentence
    punctuation, almost never part of a secret); "!" and "?" stay in."""
    start, end = value.span(group)
    if group == "plain":
        end = start + len(value.group(group).rstrip(".,;:)]}>"))
    return start, end


def _clause_ends(text: str, pos: int) -> bool:
    return _CLAUSE_END.match(text, pos) is not None


def _digit_count(value: str) -> int:
    return sum(1 for c in value if c.isdigit())


# --------------------------------------------------------------------------
# Rules
# --------------------------------------------------------------------------

_Scanner = Callable[[str], Iterator[tuple[int, int]]]


@dataclass(frozen=True)
class _TextRule:
    rule: str
    description: str
    scan: _Scanner
    shape: bool  # a token shape: also looked for inside paths


def _regex(
    pattern: str,
    flags: int = 0,
    *,
    group: str = "secret",
    accept: Callable[[re.Match[str]], bool] | None = None,
) -> _Scanner:
    """A scanner yielding the span of ``group`` (or the whole match) per hit."""
    compiled = re.compile(pattern, flags)
    has_group = group in compiled.groupindex

    def scan(text: str) -> Iterator[tuple[int, int]]:
        for match in compiled.finditer(text):
            if accept is not None and not accept(match):
                continue
            span = match.span(group) if has_group else match.span()
            if span[1] > span[0]:
                yield span

    return scan


# PEM blocks (RSA, EC, DSA, OPENSSH, ENCRYPTED, PGP ...) with at least some key
# material after the header, up to the END line or, if cut off, the end of text.
_PEM = (
    r"-----BEGIN[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----"
    r"(?:\s|\\[nr])*(?:[A-Za-z-]+:[^\n\\]*(?:\s|\\[nr])+)*"
    r"[A-Za-z0-9+/=]{16}"
    r".*?(?:-----END[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----|\Z)"
    r"|PuTTY-User-Key-File-\d+:.*?Private-Lines:\s*\d+\s*[A-Za-z0-9+/=\s]{16,}"
    r"(?:Private-MAC:[ \t]*[0-9a-fA-F]+)?"
)


def _url_password_ok(match: re.Match[str]) -> bool:
    value = match.group("secret")
    return value.lower() not in {"password", "pass", "passwd", "pwd", "secret"} and (
        _PLACEHOLDER.fullmatch(value) is None
    )


# --- English disclosures ---------------------------------------------------

_EN_KEYWORD = re.compile(
    r"""
    (?<![A-Za-z0-9])
    (?P<kw>
        pass[ _\-]?(?:word|code|phrase)s?
      | passwd | pwd
      | pin(?:[ _\-]?(?:code|number))?
      | api[ _\-]?(?:keys?|secrets?|tokens?)
      | secret[ _\-]?access[ _\-]?keys?
      | (?:secret|access|private|signing|encryption|master|license|licence)[ _\-]?keys?
      | (?:client|app|application|consumer|webhook|jwt|shared)[ _\-]?secrets?
      | (?:access|auth|authentication|refresh|bearer|bot|session|oauth|id
          |personal[ _\-]?access)[ _\-]?tokens?
      | secrets? | tokens? | credentials? | creds
    )
    (?![A-Za-z0-9])
    """,
    re.IGNORECASE | re.VERBOSE,
)
_EN_QUALIFIER = re.compile(r"[ \t]+(?:for|of|on|at|to|in|with|from)(?=[ \t])", re.IGNORECASE)
_EN_WORD = re.compile(r"[ \t]+[^\s:=,;!?。，：；\"'`]+")
_EN_CONNECTOR = re.compile(
    r"""
      (?P<eq>["']?[ \t]*(?::=|=>|=(?!=)))
    | (?P<colon>["']?[ \t]*:(?!//))
    | (?P<verb>
          (?:'s|[ \t]+(?:is|was|are|were|will[ \t]+be|should[ \t]+be|would[ \t]+be))
          (?:[ \t]+(?:now|still|just|currently|actually|simply|always))?
          (?:[ \t]+(?:set|changed|reset|updated|switched)[ \t]+to)?
          (?:[ \t]*:)?
        | [ \t]+(?:has|have|had)[ \t]+been[ \t]+(?:set|changed|reset|updated|switched)[ \t]+to
        | [ \t]+(?:set|changed|reset|updated|switched)[ \t]+to
        | [ \t]+equals
        | [ \t]*(?:就是|是|为|設為|设为|设置为|设置成|改成|改为)
      )
    | (?P<to>[ \t]+(?:to|as|into))
    | (?P<none>(?=[ \t]))
    """,
    re.IGNORECASE | re.VERBOSE,
)
_NUMBER_WORDS = r"(?:zero|oh|one|two|three|four|five|six|seven|eight|nine)"
_EN_VALUE = re.compile(
    r"""
    [ \t]*
    (?:
        ["'`“‘](?P<quoted>[^"'`“”‘’\n]{1,256})["'`”’]
      | ["'`“‘]?
        (?:
            (?P<digits>\d+(?:[ \-]\d+)+)(?![A-Za-z0-9])
          | (?P<spoken>(?:"""
    + _NUMBER_WORDS
    + r"""[ ,\-]+){3,}"""
    + _NUMBER_WORDS
    + r""")(?![A-Za-z])
          | (?P<plain>[!#-&(-_a-~\u00c0-\u024f]+)
        )
    )
    """,
    re.IGNORECASE | re.VERBOSE,
)


def _en_family(keyword: str) -> str:
    key = re.sub(r"[ _\-]", "", keyword.lower())
    if key.startswith("pin"):
        return "pin"
    if key.startswith(("pass", "pwd")):
        return "password"
    if key in {"secret", "secrets", "token", "tokens", "credential", "credentials", "creds"}:
        return "ambiguous"  # also ordinary English words: "the secret is patience"
    return "compound"


def _en_value_ok(family: str, conn: str, value: re.Match[str], text: str) -> bool:
    if value.group("digits") is not None:
        return _digit_count(value.group("digits")) >= 4
    if value.group("spoken") is not None:
        return True
    quoted = value.group("quoted") is not None
    raw = value.group("quoted") if quoted else value.group("plain")
    core, punct_after = _core(raw, quoted)
    if len(core) < 4 or _is_filler(core, raw):
        return False
    has_digit = any(c.isdigit() for c in core)
    has_alpha = any(c.isalpha() for c in core)
    has_symbol = any(c in _SYMBOLS for c in core)
    clause_ends = punct_after or _clause_ends(text, value.end())
    if family == "pin":
        return _digit_count(core) >= 4
    if conn == "to":
        return has_digit
    if conn == "none":
        if core.isdigit():
            return len(core) >= 6 and clause_ends
        return has_digit and has_alpha and len(core) >= 6
    if family == "ambiguous" and conn != "eq":
        mixed_case = core != core.lower() and core != core.upper()
        if not (has_digit or has_symbol or (len(core) >= 12 and mixed_case)):
            return False
    if conn == "verb" and not quoted and core.isalpha():
        return clause_ends
    return True


def _en_candidates(text: str, kw_end: int) -> Iterator[int]:
    """Where a connector may start: right after the keyword, or after a
    qualifier such as "for my gmail account" (up to three words)."""
    yield kw_end
    qualifier = _EN_QUALIFIER.match(text, kw_end)
    if qualifier is None:
        return
    pos = qualifier.end()
    for _ in range(3):
        word = _EN_WORD.match(text, pos)
        if word is None:
            return
        pos = word.end()
        yield pos


def _english_scanner(families: frozenset[str]) -> _Scanner:
    def scan(text: str) -> Iterator[tuple[int, int]]:
        for keyword in _EN_KEYWORD.finditer(text):
            family = _en_family(keyword.group("kw"))
            if family not in families:
                continue
            for start in _en_candidates(text, keyword.end()):
                connector = _EN_CONNECTOR.match(text, start)
                if connector is None:
                    continue
                conn = connector.lastgroup or "none"
                value = _EN_VALUE.match(text, connector.end())
                if value is None or not _en_value_ok(family, conn, value, text):
                    continue
                group = next(
                    g for g in ("quoted", "digits", "spoken", "plain") if value.group(g) is not None
                )
                yield _value_span(value, group)
                break

    return scan


# --- Chinese disclosures ---------------------------------------------------

_ZH_KEYWORD = re.compile(
    r"(?:密码|密碼|口令|密钥|密鑰|私钥|私鑰|秘钥|秘鑰|令牌|验证码|驗證碼|校验码|动态码|安全码|授权码|PIN码|PIN碼)",
    re.IGNORECASE,
)
_ZH_UNITS = "年月日号號位个個次天点點分秒岁歲块塊元万萬千百十条條遍字"
_ZH_NUMERALS = "零〇一二三四五六七八九幺两"
_ZH_TAIL = re.compile(
    r"""
    [ \t]*
    (?:
        (?:都|也|还|就|则|应该|现在|一直|其实|目前|仍然|依然|暂时|默认|原来|依旧|已经|被)?
        [ \t]*
        (?:就是|是|为|為|设置成|设置为|设为|设成|改成|改为|换成|变成|更改为|修改为|修改成|重置为|重置成|:|=)
    )?
    [ \t]*["'“‘「『]?[ \t]*
    (?:
        (?P<digits>\d(?:[ \-]?\d){3,})(?![0-9A-Za-z"""
    + _ZH_UNITS
    + r"""])
      | (?P<zhnum>["""
    + _ZH_NUMERALS
    + r"""](?:[ ,，、]?["""
    + _ZH_NUMERALS
    + r"""]){3,})(?!["""
    + _ZH_UNITS
    + r"""])
      | (?P<plain>[!#-&(-_a-~]+)
    )
    """,
    re.IGNORECASE | re.VERBOSE,
)


def _zh_value_ok(value: re.Match[str], text: str) -> bool:
    if value.group("digits") is not None or value.group("zhnum") is not None:
        return True
    raw = value.group("plain")
    core, punct_after = _core(raw, quoted=False)
    if len(core) < 4 or _is_filler(core, raw):
        return False
    end = value.end()
    if end < len(text) and text[end] in _ZH_UNITS and core.isdigit():
        return False  # "密码是2024年改的": a date, not a password
    if core.isalpha():
        # "密码是wifi的那个" is not a disclosure; "密码是hunter" at a clause end is.
        return punct_after or end == len(text) or _clause_ends(text, end)
    return True


def _chinese_scanner(text: str) -> Iterator[tuple[int, int]]:
    for keyword in _ZH_KEYWORD.finditer(text):
        value = _ZH_TAIL.match(text, keyword.end())
        if value is None or not _zh_value_ok(value, text):
            continue
        group = next(g for g in ("digits", "zhnum", "plain") if value.group(g) is not None)
        yield _value_span(value, group)


# --- High-entropy assignments ------------------------------------------------

_ENTROPY_ASSIGNMENT = re.compile(
    r"""
    (?<![A-Za-z0-9_.\-])(?P<name>[A-Za-z_][A-Za-z0-9_.\-]*)["']?[ \t]*(?::=|=>|=|:)[ \t]*[rbu]?["'`]?
    (?P<secret>[A-Fa-f0-9]{32,}|[A-Za-z0-9+/]{32,}={0,2}|[A-Za-z0-9_\-]{32,})
    (?![A-Za-z0-9+/=_\-])
    """,
    re.VERBOSE,
)
_SECRET_NAME = re.compile(
    r"key|secret|token|pass|pwd|auth|credential|salt|signature|private|cookie|session",
    re.IGNORECASE,
)


def _shannon(value: str) -> float:
    counts: dict[str, int] = {}
    for char in value:
        counts[char] = counts.get(char, 0) + 1
    total = len(value)
    return -sum(n / total * math.log2(n / total) for n in counts.values())


def _entropy_ok(match: re.Match[str]) -> bool:
    if _SECRET_NAME.search(match.group("name")) is None:
        return False
    value = match.group("secret")
    if not (any(c.isdigit() for c in value) and any(c.isalpha() for c in value)):
        return False
    if "_" in value or "-" in value:
        # snake_case or slug words ("user_profile_settings_v2") are not keys;
        # Django's "django-insecure-..." style keys still have high entropy.
        words = re.split(r"[_\-]", value)
        if max(len(w) for w in words) < 16:
            return False
    return _shannon(value) >= 3.0


_TEXT_RULES: tuple[_TextRule, ...] = (
    _TextRule(
        "private_key_block",
        "PEM, OpenSSH or PuTTY private key",
        _regex(_PEM, re.DOTALL),
        True,
    ),
    _TextRule(
        "aws_access_key",
        "AWS access key id",
        _regex(r"(?<![A-Za-z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Za-z0-9])"),
        True,
    ),
    _TextRule(
        "aws_secret_key",
        "AWS secret access key assignment",
        _regex(
            r"(?i:aws[ _\-]?secret(?:[ _\-]?access)?(?:[ _\-]?key)?)[\"']?[ \t]*"
            r"(?:[:=]|=>|[ \t]is[ \t])[ \t]*[\"']?"
            r"(?P<secret>[A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])"
        ),
        True,
    ),
    _TextRule(
        "github_token",
        "GitHub token",
        _regex(r"(?<![A-Za-z0-9_])(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})"),
        True,
    ),
    _TextRule(
        "service_token",
        "GitLab, npm or Hugging Face token",
        _regex(
            r"(?<![A-Za-z0-9_])(?:glpat-[A-Za-z0-9_\-]{20,}|npm_[A-Za-z0-9]{36,}"
            r"|hf_[A-Za-z0-9]{30,})"
        ),
        True,
    ),
    _TextRule(
        "slack_token",
        "Slack token",
        _regex(r"(?<![A-Za-z0-9])(?:xox[abprs]-[A-Za-z0-9\-]{10,}|xapp-\d-[A-Za-z0-9\-]{10,})"),
        True,
    ),
    _TextRule(
        "slack_webhook",
        "Slack incoming webhook URL",
        _regex(
            r"hooks\.slack\.com/services/T[A-Za-z0-9]+/B[A-Za-z0-9]+/(?P<secret>[A-Za-z0-9]{16,})"
        ),
        True,
    ),
    _TextRule(
        "stripe_key",
        "Stripe secret or restricted key",
        _regex(r"(?<![A-Za-z0-9_])(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}"),
        True,
    ),
    _TextRule(
        "sk_api_key",
        "OpenAI/DashScope-style sk- API key",
        _regex(r"(?<![A-Za-z0-9_\-])sk-[A-Za-z0-9_\-]{20,}"),
        True,
    ),
    _TextRule(
        "google_api_key",
        "Google API key",
        _regex(r"(?<![A-Za-z0-9_\-])AIza[0-9A-Za-z_\-]{35}(?![0-9A-Za-z_\-])"),
        True,
    ),
    _TextRule(
        "jwt",
        "JSON Web Token",
        _regex(r"(?<![A-Za-z0-9_\-])eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"),
        True,
    ),
    _TextRule(
        "url_credentials",
        "URL with an inline password",
        _regex(
            r"\b[A-Za-z][A-Za-z0-9+.\-]{0,20}://[^\s/:@?#]+:(?P<secret>[^\s/@?#]+)@[^\s/@]",
            accept=_url_password_ok,
        ),
        True,
    ),
    _TextRule(
        "bearer_token",
        "Bearer token",
        _regex(r"(?<![A-Za-z0-9])(?i:bearer)\s+(?P<secret>[A-Za-z0-9\-._~+/]{20,}=*)"),
        True,
    ),
    _TextRule(
        "basic_auth",
        "HTTP Basic credentials",
        _regex(
            r"(?i:authorization)[\"']?\s*[:=]?\s*[\"']?(?i:basic)\s+"
            r"(?P<secret>[A-Za-z0-9+/]{8,}={0,2})"
        ),
        True,
    ),
    _TextRule(
        "high_entropy_assignment",
        "long random value assigned to a secret-like name",
        _regex(_ENTROPY_ASSIGNMENT.pattern, re.VERBOSE, accept=_entropy_ok),
        False,
    ),
    _TextRule(
        "zh_password_phrase",
        "Chinese password, key or code disclosure",
        _chinese_scanner,
        False,
    ),
    _TextRule(
        "password_assignment",
        "password or PIN disclosure",
        _english_scanner(frozenset({"password", "pin"})),
        False,
    ),
    _TextRule(
        "secret_assignment",
        "API key, token, secret or credential disclosure",
        _english_scanner(frozenset({"compound", "ambiguous"})),
        False,
    ),
)


# --------------------------------------------------------------------------
# Paths
# --------------------------------------------------------------------------

_PATH_SPLIT = re.compile(r"[\\/]+")
_CREDENTIAL_DIRS = {
    ".ssh": ".ssh directory",
    ".gnupg": ".gnupg directory",
    ".aws": ".aws directory",
    ".kube": ".kube directory",
    ".docker": ".docker directory",
    ".password-store": "pass password store",
}
_CREDENTIAL_FILES = {
    ".netrc": "netrc file",
    "_netrc": "netrc file",
    ".pgpass": "PostgreSQL password file",
    ".npmrc": "npm config with tokens",
    ".pypirc": "PyPI config with tokens",
    ".git-credentials": "git credential store",
    ".htpasswd": "htpasswd file",
    ".envrc": "direnv environment file",
}
_KEY_EXTENSIONS = (
    ".pem",
    ".key",
    ".p12",
    ".pfx",
    ".p8",
    ".ppk",
    ".keystore",
    ".jks",
    ".kdbx",
    ".keychain",
    ".keychain-db",
    ".tfstate",
    ".tfstate.backup",
)
_SSH_KEY_NAME = re.compile(r"id_(?:rsa|dsa|ecdsa|ed25519)(?:_sk)?(?:[._\-].*)?")
_SECRET_NAME_PARTS = ("password", "secret", "密码", "密碼", "密钥", "私钥")


def _path_component_finding(name: str, parent: str) -> str | None:
    """The description of why one lower-cased path component is sensitive."""
    if name in _CREDENTIAL_DIRS:
        return _CREDENTIAL_DIRS[name]
    if name in _CREDENTIAL_FILES:
        return _CREDENTIAL_FILES[name]
    if name == ".env" or name.startswith(".env.") or name.endswith(".env"):
        return "environment file"
    if _SSH_KEY_NAME.fullmatch(name) and not name.endswith(".pub"):
        return "SSH private key file"
    if name.endswith(_KEY_EXTENSIONS):
        return "key, certificate, keystore or state file"
    stem = name.split(".", 1)[0]
    if stem in {"credential", "credentials"} or stem.endswith(("_credentials", "-credentials")):
        return "credentials file"
    if name in {"shadow", "gshadow"} and parent == "etc":
        return "system password hashes"
    if any(part in name.replace("secretar", "") for part in _SECRET_NAME_PARTS):
        return "name mentions a password or secret"
    return None


# --------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------


def _scan_first(normalised: str, rules: tuple[_TextRule, ...]) -> Finding | None:
    for rule in rules:
        if next(rule.scan(normalised), None) is not None:
            return Finding(rule.rule, rule.description)
    return None


def find_sensitive_text(text: str) -> Finding | None:
    """The first content rule that ``text`` matches, or ``None``."""
    if not text:
        return None
    return _scan_first(_nfkc(text), _TEXT_RULES)


def find_sensitive_path(path: str) -> Finding | None:
    """Why ``path`` (POSIX or Windows style) names a credential file, or ``None``.

    Path-shape matches have rule ``credential_path``; a path that embeds a
    token shape (``https://user:pass@host/...``, an ``sk-`` key) gets that
    token's rule.
    """
    if not path:
        return None
    normalised = _nfkc(path)
    parent = ""
    for part in _PATH_SPLIT.split(normalised):
        # Windows ignores trailing dots and spaces: "id_rsa." is "id_rsa".
        name = part.strip().rstrip(". ").lower()
        if not name:
            continue
        description = _path_component_finding(name, parent)
        if description is not None:
            return Finding(PATH_RULE, description)
        parent = name
    return _scan_first(normalised, tuple(r for r in _TEXT_RULES if r.shape))


def ensure_not_sensitive(*, text: str | None = None, path: str | None = None) -> None:
    """Raise :class:`SensitiveContent` if ``path`` or ``text`` looks like a credential.

    The message names the rule, never the matched text.
    """
    checks: list[tuple[str, Finding | None]] = []
    if path is not None:
        checks.append(("path", find_sensitive_path(path)))
    if text is not None:
        checks.append(("content", find_sensitive_text(text)))
    for what, finding in checks:
        if finding is not None:
            raise SensitiveContent(
                f"{what} refused: it looks like a credential (rule {finding.rule}: "
                f"{finding.description}); it was not stored or sent to a model"
            )


def redact_secrets(text: str) -> str:
    """``text`` with each secret value matched by a content rule replaced by
    ``[REDACTED]``; the words around it (and the keyword, e.g. "password is")
    are kept, and characters outside the secrets are left exactly as they were.
    """
    for _ in range(4):  # a replacement could, in theory, expose another match
        if not text:
            return text
        normalised = _normalise(text)
        spans: list[tuple[int, int]] = []
        for rule in _TEXT_RULES:
            spans.extend(rule.scan(normalised.text))
        if not spans:
            return text
        merged: list[tuple[int, int]] = []
        for start, end in sorted(normalised.orig_span(s, e) for s, e in spans):
            if merged and start <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], end))
            else:
                merged.append((start, end))
        out: list[str] = []
        cursor = 0
        for start, end in merged:
            out.append(text[cursor:start])
            out.append(REDACTED)
            cursor = end
        out.append(text[cursor:])
        redacted = "".join(out)
        if redacted == text:
            return text
        text = redacted
    return text
