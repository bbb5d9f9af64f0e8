"""Disclosure rules: a keyword, a connector and a value that looks like one.

What: "my password is hunter2", "api key: ...", "密码是123456" are flagged;
the connector may be ``is``, ``:``, ``=``, 是, 为, 设置成, ... and the value
is checked by the heuristics in :mod:`memjobs_client.sensitive.values`.

Why a keyword, a connector *and* a value: ordinary talk about passwords ("I
forgot my password yesterday", "我忘记密码了") is not flagged.  This is a
heuristic: it trades a few misses for few false refusals.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from memjobs_client.sensitive.rules import Scanner
from memjobs_client.sensitive.values import (
    SYMBOLS,
    at_clause_end,
    digit_count,
    is_filler,
    value_core,
    value_span,
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
        return digit_count(value.group("digits")) >= 4
    if value.group("spoken") is not None:
        return True
    quoted = value.group("quoted") is not None
    raw = value.group("quoted") if quoted else value.group("plain")
    core, punct_after = value_core(raw, quoted)
    if len(core) < 4 or is_filler(core, raw):
        return False
    has_digit = any(c.isdigit() for c in core)
    has_alpha = any(c.isalpha() for c in core)
    has_symbol = any(c in SYMBOLS for c in core)
    clause_ends = punct_after or at_clause_end(text, value.end())
    if family == "pin":
        return digit_count(core) >= 4
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


def english_scanner(families: frozenset[str]) -> Scanner:
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
                yield value_span(value, group)
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
    core, punct_after = value_core(raw, quoted=False)
    if len(core) < 4 or is_filler(core, raw):
        return False
    end = value.end()
    if end < len(text) and text[end] in _ZH_UNITS and core.isdigit():
        return False  # "密码是2024年改的": a date, not a password
    if core.isalpha():
        # "密码是wifi的那个" is not a disclosure; "密码是hunter" at a clause end is.
        return punct_after or end == len(text) or at_clause_end(text, end)
    return True


def chinese_scanner(text: str) -> Iterator[tuple[int, int]]:
    for keyword in _ZH_KEYWORD.finditer(text):
        value = _ZH_TAIL.match(text, keyword.end())
        if value is None or not _zh_value_ok(value, text):
            continue
        group = next(g for g in ("digits", "zhnum", "plain") if value.group(g) is not None)
        yield value_span(value, group)
