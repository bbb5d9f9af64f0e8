"""English disclosure rules: a keyword, a connector and a value that looks like one.

What: "my password is hunter2", "api key: ...", "wifi key = ..." are flagged;
the connector may be ``is``, ``:``, ``=``, "set to", ... and the value is
checked by the heuristics in :mod:`memjobs_client.sensitive.values`.  Also the
value first ("hunter2 is my password") and wallet seed phrases.  Chinese
phrasings are in :mod:`memjobs_client.sensitive.zh`.

Why a keyword, a connector *and* a value: ordinary talk about passwords ("I
forgot my password yesterday", "我忘记密码了") is not flagged.  This is a
heuristic: it trades a few misses for few false refusals.  A number after
"tokens" or "secret" is a count ("max_tokens: 2048"), not a value.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import lru_cache
from itertools import chain

from memjobs_client.sensitive.rules import Scanner, folded
from memjobs_client.sensitive.values import (
    SYMBOLS,
    at_clause_end,
    digit_count,
    is_filler,
    value_core,
)

# --- English disclosures ---------------------------------------------------

_EN_KEYWORD = re.compile(
    r"""
    (?<![A-Za-z0-9])
    (?P<kw>
        p[a@4][s$5][s$5][ _\-]?(?:w|vv)[o0]rd(?:s|[ _\-]?phrase)? | pass[ _\-]?phrase
      | passwd | pwd | pw | pass | psk
      | (?:wi[ _\-]?fi|wlan|wpa2?|wpa3|wireless|network|router|hotspot)[ _\-]?(?:key|pass)
      | pass[ _\-]?codes? | pin(?:[ _\-]?(?:code|number))?
      | api[ _\-]?(?:keys?|secrets?|tokens?)
      | secret[ _\-]?access[ _\-]?keys?
      | (?:secret|access|private|signing|encryption|master|license|licence)[ _\-]?keys?
      | (?:client|app|application|consumer|webhook|jwt|shared)[ _\-]?secrets?
      | (?:access|auth|authentication|refresh|bearer|bot|session|oauth|id
          |personal[ _\-]?access)[ _\-]?tokens?
      | secrets? | tokens? | credentials? | creds | (?<![_.\-])key
    )
    (?![A-Za-z0-9])
    (?:(?=["']?(?:[:=][ \t]*|[ \t]*)["'`“‘]?\[redacted\])(?P<marked>))?
    """,
    re.VERBOSE,
)
"""The keywords, in lower case: matched, case-sensitively, against the folded
text (:func:`~memjobs_client.sensitive.rules.folded`), where they are
matched as with ``re.IGNORECASE``, three times faster. ``marked`` takes part
when a marker is the keyword's value ("password: [REDACTED]", a redaction's
later rounds): every connector that can follow such a keyword is followed by
a marker, which :func:`_value_opens` refuses, and no qualifier can (not after
a space and then ":" or "=": " :[REDACTED]" is read as no connector and a
value that opens with ":"); so the
plausibility check fails for each family (:data:`_EN_PLAUSIBLE`), and the
keyword is left out, by the C library (the keywords matched are the same: the
group is optional, after the keyword)."""
# The keywords alone, for a text that holds no marker.
_EN_KEYWORD_ONLY = re.compile(_EN_KEYWORD.pattern[: _EN_KEYWORD.pattern.rindex("(?:(?=")], re.VERBOSE)
_EN_QUALIFIER = re.compile(r"[ \t]+(?:for|of|on|at|to|in|with|from)(?=[ \t])", re.IGNORECASE)
_EN_WORD = re.compile(r"[ \t]+[^\s:=,;!?。，：；\"'`]+")
# The connectors, one pattern each: "=", ":", a verb ("is", "was set to" …),
# "to", or none (a space).
_CONN_EQ = r"""(?P<eq>["']?[ \t]*(?::=|=>|=(?!=)))"""
_CONN_COLON = r"""(?P<colon>["']?[ \t]*(?::(?!//)|[–—→]|->|-(?=[ \t])))"""
_CONN_VERB = r"""
      (?P<verb>
          (?:'s|[ \t]+(?:is|was|are|were|will[ \t]+be|should[ \t]+be|would[ \t]+be))
          (?:[ \t]+(?:now|still|just|currently|actually|simply|always))?
          (?:[ \t]+(?:set|changed|reset|updated|switched)[ \t]+to)?
          (?:[ \t]*:)?
        | [ \t]+(?:has|have|had)[ \t]+been[ \t]+(?:set|changed|reset|updated|switched)[ \t]+to
        | [ \t]+(?:set|changed|reset|updated|switched)[ \t]+to
        | [ \t]+equals
        | [ \t]*[,?;.!]?[ \t]+(?:it'?s|it[ \t]+is|that'?s|which[ \t]+is)
        | [ \t]*(?:就是|是|为|設為|设为|设置为|设置成|改成|改为)
      )"""
_CONN_TO = r"(?P<to>[ \t]+(?:to|as|into))"
_CONN_NONE = r"(?P<none>(?=[ \t]))"
_EN_CONNECTOR = re.compile(
    "|".join((_CONN_EQ, _CONN_COLON, _CONN_VERB, _CONN_TO, _CONN_NONE)), re.IGNORECASE | re.VERBOSE
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


# A value that opens with a marker ("[REDACTED]", "[REDACTED])") is filler
# (values.is_filler).
_FILLER_MARKER = r"\[[A-Za-z\ _\-]{3,20}\]"


def _value_opens(least: int, digits: str = r"\d[\d \-]{3}") -> str:
    """A pattern: how a value of :data:`_EN_VALUE` that :func:`_en_value_ok` may
    take opens (``least``: the fewest characters of a quoted or plain one;
    ``digits``: how one of digits opens), read no further than that: never on
    over the keywords that follow (``pw=pw=…``). Not a marker such as
    ``[REDACTED]`` that makes it filler (redaction reads its own output again)."""
    return (
        r"""
    [ \t]*
    (?-i:(?!["'`“‘]?"""
        + _FILLER_MARKER
        + r"""))
    (?:
        ["'`“‘][^"'`“”‘’\n]{"""
        + str(least)
        + r"""}
      | ["'`“‘]?
        (?:
            """
        + digits
        + r"""
          | (?:"""
        + _NUMBER_WORDS
        + r"""[ ,\-]+){3}"""
        + _NUMBER_WORDS
        + r"""
          | [!#-&(-_a-~\u00c0-\u024f]{"""
        + str(least)
        + r"""}
        )
    )
    """
    )


_SPOKEN_OPENS = r"""[ \t]*["'`“‘]?(?:""" + _NUMBER_WORDS + r"""[ ,\-]+){3}""" + _NUMBER_WORDS
_QUALIFIED = "(?:" + _EN_QUALIFIER.pattern + "(?:" + _EN_WORD.pattern + "){1,3})?"


def _plausible(pattern: str) -> re.Pattern[str]:
    return re.compile(_QUALIFIED + "(?:" + pattern + ")", re.IGNORECASE | re.VERBOSE)


# What must follow a keyword of each family for any of its values to be judged
# (a necessary condition, tried by the C library once per keyword): a connector,
# after a qualifier of one to three words or none, then the opening of a value
# long enough for :func:`_en_value_ok`: four characters (six after no
# connector, for all but a PIN; a key wants "=", ":" or a verb and six, or a
# number spelt out; after no connector, digits in two groups at least, as
# "12 34": one group is a plain value, six characters at least). The keywords
# of ``password=x password=x …``, of JSON keys, of "password 1234 key 5678" stop
# here (issue 31: a Python step per keyword, in both rounds of a redaction).
_EN_PLAUSIBLE: dict[str, re.Pattern[str]] = {
    "pin": _plausible("(?:" + _EN_CONNECTOR.pattern + ")" + _value_opens(4)),
    "key": _plausible(
        "(?:"
        + "|".join((_CONN_EQ, _CONN_COLON, _CONN_VERB))
        + ")"
        + _value_opens(6)
        + "|(?:"
        + _CONN_TO
        + "|"
        + _CONN_NONE
        + ")"
        + _SPOKEN_OPENS
    ),
}
_EN_PLAUSIBLE_OTHERS = _plausible(
    "(?:"
    + "|".join((_CONN_EQ, _CONN_COLON, _CONN_VERB, _CONN_TO))
    + ")"
    + _value_opens(4)
    + "|"
    + _CONN_NONE
    + _value_opens(6, r"\d++[ \-]\d")
)


@lru_cache(maxsize=256)
def _en_family(keyword: str) -> str:
    key = re.sub(r"[ _\-]", "", keyword.lower())
    if key.startswith(("pin", "passcode")):
        return "pin"
    if key in {"pw", "pass", "psk"}:
        return "short"  # also ordinary words: "pass the salt"
    if key.startswith(("pass", "pwd", "p@", "p4", "wifi", "wlan", "wpa", "wireless", "network", "router", "hotspot")):
        return "password"
    if key == "key":
        return "key"  # also a door's, a map's, a shortcut's: "the key is under the mat"
    if key in {"secret", "secrets", "token", "tokens", "credential", "credentials", "creds"}:
        return "ambiguous"  # also ordinary English words: "the secret is patience"
    return "compound"


_LOGIN_CONTEXT = re.compile(r"(?i:user(?:[ _]?name)?|login|log[ _]in|account|admin|root|ssid|wi-?fi)|账号|帐号|用户名")


#: A connector and the value after it, in one pattern: the connector as
#: :data:`_EN_CONNECTOR` matches it (atomic: the first of its alternatives that
#: matches, none other tried when no value follows), then, where it ends (the
#: empty group ``opens``), the value as :data:`_EN_VALUE` matches it. One call
#: and one tuple of groups a keyword, where two patterns and a group each were
#: (issue 31: the Python steps per keyword were most of a text of secrets' cost).
_EN_JUDGED = re.compile("(?>" + _EN_CONNECTOR.pattern + ")(?P<opens>)" + _EN_VALUE.pattern, re.IGNORECASE | re.VERBOSE)
assert tuple(_EN_JUDGED.groupindex) == (
    "eq",
    "colon",
    "verb",
    "to",
    "none",
    "opens",
    "quoted",
    "digits",
    "spoken",
    "plain",
)


def _en_value(family: str, value: re.Match[str], text: str) -> tuple[int, int] | None:
    """The span of the secret in a match of :data:`_EN_JUDGED` after a keyword
    of ``family``, or None when the value does not look like one."""
    eq, colon, verb, to, _, _, raw, digits, spoken, plain = value.groups()
    conn = (
        "eq"
        if eq is not None
        else "colon"
        if colon is not None
        else "verb"
        if verb is not None
        else "to"
        if to is not None
        else "none"
    )
    # "pass the salt" is not a disclosure; "login admin / pass 711475" is.
    if family == "short" and conn not in ("eq", "colon", "verb"):
        opens = value.start("opens")
        if conn != "none" or _LOGIN_CONTEXT.search(text, max(0, opens - 48), opens) is None:
            return None
    if digits is not None:
        if digit_count(digits) >= 4 and family not in ("ambiguous", "compound", "key"):
            return value.span("digits")
        return None
    if spoken is not None:
        return value.span("spoken")
    quoted = raw is not None
    if raw is None:
        raw = plain
    core, punct_after = value_core(raw, quoted)
    # Filler (a stop word, a placeholder, code) is judged last, when the rest
    # would take the value: most values a keyword is followed by fail sooner.
    if (
        len(core) >= 4
        and _en_shape_ok(family, conn, core, quoted, punct_after, value.end(), text)
        and not is_filler(core, raw)
    ):
        if quoted:
            return value.span("quoted")
        start = value.start("plain")
        # A plain value loses trailing ",.;:" (values.value_span).
        return start, start + len(raw.rstrip(".,;:)]}>"))
    return None


def _en_shape_ok(family: str, conn: str, core: str, quoted: bool, punct_after: bool, end: int, text: str) -> bool:
    """Whether a value ``core`` (four characters at least) looks like a secret
    of ``family`` after a ``conn`` connector, filler aside."""
    has_digit = any(map(str.isdigit, core))
    if family == "pin":
        return digit_count(core) >= 4
    has_alpha = any(map(str.isalpha, core))
    if family == "key":
        # "the key is superSecret99" is a secret; "key: value", "the key is F5",
        # "the key is Ctrl+Shift+S" are not: letters and digits, six at least.
        return conn in ("eq", "colon", "verb") and has_digit and has_alpha and len(core) >= 6
    if family in ("ambiguous", "compound") and _COUNT.fullmatch(core):
        return False  # "MAX_TOKENS=4096", "input tokens: 15320": a count, not a token
    has_symbol = not SYMBOLS.isdisjoint(core)
    if family == "short" and not (has_digit or has_symbol):
        return False
    if family == "short" and conn == "none":
        return len(core) >= 6
    if conn == "to":
        return has_digit
    if conn == "none":
        if core.isdigit():
            return len(core) >= 6 and (punct_after or at_clause_end(text, end))
        return has_digit and has_alpha and len(core) >= 6
    if family == "ambiguous" and conn != "eq":
        mixed_case = core != core.lower() and core != core.upper()
        if not (has_digit or has_symbol or (len(core) >= 12 and mixed_case)):
            return False
    if conn == "verb" and not quoted and core.isalpha():
        return punct_after or at_clause_end(text, end)
    return True


_COUNT = re.compile(r"[\d,._]+[kKmM]?")


def _en_candidates(text: str, kw_end: int) -> list[int]:
    """Where a connector may start: right after the keyword, or after a
    qualifier such as "for my gmail account" (up to three words). A list, not
    a generator: one is made for each keyword of a text of secrets."""
    qualifier = _EN_QUALIFIER.match(text, kw_end)
    if qualifier is None:
        return [kw_end]
    candidates = [kw_end]
    pos = qualifier.end()
    for _ in range(3):
        word = _EN_WORD.match(text, pos)
        if word is None:
            break
        pos = word.end()
        candidates.append(pos)
    return candidates


#: A value at least this long is judged once: the keywords inside it
#: ("pw=pw=pw=…") are not each judged again, which made a long run of them cost
#: its length squared (issue 31). Shorter values are re-read, as before.
_LONG_VALUE = 256


#: The last text's keywords, one tuple read and replaced whole (threads never see
#: one text's half with another's): the password and the secret rules look for
#: the same keywords in the same text, one after the other.
_last_keywords: tuple[str, list[tuple[int, int]]] = ("", [])


def _keywords(text: str) -> list[tuple[int, int]]:
    """The span of each keyword in ``text``. Spans, not matches: a list of
    hundreds of thousands of match objects kept the garbage collector busy
    (``pw=pw=…``: three times the cost of the search)."""
    global _last_keywords
    last = _last_keywords
    if last[0] is text:
        return last[1]
    fold = folded(text)
    if "[redacted]" not in fold:  # no marker: none is left out, and the plain pattern is faster
        found = [keyword.span() for keyword in _EN_KEYWORD_ONLY.finditer(fold)]
    else:
        found = [keyword.span() for keyword in _EN_KEYWORD.finditer(fold) if keyword.lastindex == 1]
    _last_keywords = (text, found)
    return found


#: The family of each keyword as written (:func:`_en_family`), looked up in a
#: dictionary: a step per keyword of a text of secrets, where the cached
#: function's call was several.
_families: dict[str, str] = {}


def _family(keyword: str) -> str:
    family = _families.get(keyword)
    if family is None:
        if len(_families) >= 4096:
            _families.clear()
        family = _families[keyword] = _en_family(keyword)
    return family


def _long_end(value: re.Match[str] | None, start: int, judged_to: int) -> int:
    """``judged_to`` moved on to the end of ``value`` (judged from ``start``)
    when that is a long value (:data:`_LONG_VALUE`)."""
    if value is None:
        return judged_to
    end = value.end()
    if end - start >= _LONG_VALUE and end - value.start("opens") >= _LONG_VALUE:
        return max(judged_to, end)
    return judged_to


def _qualified(family: str, text: str, kw_end: int, judged_to: int) -> tuple[tuple[int, int] | None, int]:
    """The secret after a qualifier's words ("password for my gmail account
    is …"), tried when none follows the keyword itself; and ``judged_to``
    moved on past the long values judged (:func:`_long_end`)."""
    for start in _en_candidates(text, kw_end)[1:]:
        value = _EN_JUDGED.match(text, start)
        judged_to = _long_end(value, start, judged_to)
        span = None if value is None else _en_value(family, value, text)
        if span is not None:
            return span, judged_to
    return None, judged_to


def english_scanner(families: frozenset[str]) -> Scanner:
    plausible = {family: _EN_PLAUSIBLE.get(family, _EN_PLAUSIBLE_OTHERS).match for family in families}
    judge = _EN_JUDGED.match
    families_get = _families.get

    def scan(text: str) -> Iterator[tuple[int, int]]:
        judged_to = 0  # the end of the last long value judged
        # Whether the last keyword of each family was followed by a secret:
        # its next is judged before the plausibility check is made (a value
        # taken right after the keyword passes it: see _EN_PLAUSIBLE), so that
        # each secret of a text of them costs one pattern, not two; a value not
        # taken is then checked, and the order turned back. Either order finds
        # the same.
        judge_first: dict[str, bool] = {}
        for kw_start, kw_end in _keywords(text):
            if kw_start < judged_to:
                continue
            keyword = text[kw_start:kw_end]
            family = families_get(keyword) or _family(keyword)
            if family not in families:
                continue
            if judge_first.get(family, False):
                value = judge(text, kw_end)
                span = None if value is None else _en_value(family, value, text)
                if span is None and plausible[family](text, kw_end) is None:
                    judge_first[family] = False
                    continue
            elif plausible[family](text, kw_end) is None:
                continue
            else:
                value = judge(text, kw_end)
                span = None if value is None else _en_value(family, value, text)
            judged_to = _long_end(value, kw_end, judged_to)
            if span is not None:
                judge_first[family] = True
            else:
                span, judged_to = _qualified(family, text, kw_end, judged_to)
            if span is not None:
                yield span

    return scan


_EN_REVERSE = re.compile(
    r"""
    (?<![^\s"'“‘(])["'“‘]?(?P<value>[!#-&(-~]{4,64}?)["'”’]?[ \t]+(?:is|was|will[ \t]+be|=)[ \t]+
    (?:now[ \t]+|still[ \t]+)?(?:my|our|his|her|their|your|mom's|dad's|the[ \t]+new)[ \t]+
    (?:[A-Za-z\-]+[ \t]+){0,2}?(?:password|passcode|pin|passphrase|pin[ \t]+code|wi-?fi[ \t]+key)\b
    """,
    re.IGNORECASE | re.VERBOSE,
)


# "it's hunter2, my password"
_EN_ITS_REVERSE = re.compile(
    r"(?i:\bit'?s|\bit[ \t]+is|\bthat'?s)[ \t]+[\"'“‘]?"
    r"(?P<value>[!#-&(-~]{4,64}?)[\"'”’]?[,;]?[ \t]+"
    r"(?i:my|our|his|her|their|the)[ \t]+(?:[A-Za-z\-]+[ \t]+){0,2}?(?i:password|passcode|pin|wi-?fi[ \t]+key)\b"
)


def reverse_scanner(text: str) -> Iterator[tuple[int, int]]:
    """ "hunter2 is my password", "0852 is my new phone PIN": the value first."""
    for match in chain(_EN_REVERSE.finditer(text), _EN_ITS_REVERSE.finditer(text)):
        core = match.group("value").rstrip(".,;:!?")
        # Cheapest test first, filler (six patterns) last.
        weak = (
            len(core) < 4 or not (any(map(str.isdigit, core)) or not SYMBOLS.isdisjoint(core)) or is_filler(core, core)
        )
        if weak and not (core.isalpha() and len(core) >= 6 and core.lower() not in _COMMON_WORDS):
            continue
        start = match.start("value")
        yield start, start + len(core)


# Words that can stand before "is my password" without being one.
_COMMON_WORDS = frozenset(
    [
        "this",
        "that",
        "what",
        "which",
        "there",
        "here",
        "where",
        "something",
        "nothing",
        "everything",
        "anything",
        "always",
        "never",
        "sometimes",
        "usually",
        "probably",
        "maybe",
        "actually",
    ]
)


# "seed phrase: abandon ability able about above absent absorb abstract ..."
SEED_PHRASE = re.compile(
    r"(?i:(?:seed|recovery|mnemonic|secret|backup|wallet)[ \t]+(?:phrase|words)|mnemonic|助记词)"
    r"[^\n\w]{0,12}(?:is|are|是|为|:)?[^\n\w]{0,4}(?P<secret>(?:[a-z]{3,8}[ \t,]+){11,23}[a-z]{3,8})"
)
