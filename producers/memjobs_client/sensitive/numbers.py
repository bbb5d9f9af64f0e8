"""Numbers that are secrets: cards, identity numbers, one-time codes, PINs.

What: bank and credit card numbers (Luhn-valid, with spaces or dashes; 13–19
digits near a card word, or 15–19 digits with an issuer's prefix alone),
Chinese resident identity numbers (18 characters with a valid check digit and
a real birth date, or any 15/18 named as one), passport, social security,
IBAN and bank account numbers when named, one-time codes near their words
(验证码, verification code, OTP, 2FA, "code is" ...) and CVVs.

Why the care: ordinary speech is full of long numbers (orders, parcels,
phones, timestamps, prices).  A number alone is refused only when its own
structure says what it is (a check digit, an issuer prefix, a birth date);
otherwise a word must name it, and words that name something else (订单,
tracking, IMEI, zip code, error code) keep it out.
"""

from __future__ import annotations

import heapq
import operator
import re
from bisect import bisect_left
from collections.abc import Iterator
from datetime import date
from itertools import accumulate, repeat

from memjobs_client.sensitive.rules import DIGIT, TextRule, anchored_scanner, folded, gated, needs, regex_scanner

# --- cards ------------------------------------------------------------------

# A run of digit groups, thirteen characters at least (shorter runs hold no
# card: their look-ahead fails where they start and at each position in them,
# as the first character that is no digit, space or dash is within thirteen, so
# the runs found are those the pattern without it finds, less the short ones;
# issue 31: a Python step per short number of a text of secrets).
# Led by its first digit (the engine skips to one; a pattern opening with a
# look-behind is tried at every position), the look-behind and look-ahead read
# from after it.
_DIGIT_RUN = re.compile(r"\d(?<![\d.,/:].)(?<=(?=[\d \-]{13}).)\d*(?:[ \-]\d+)*(?![\d]|[.,]\d)")
_GROUP_SPLIT = re.compile(r"[ \-]")
_CARD_WORDS = re.compile(
    r"(?i:card|visa|master|amex|american express|discover|jcb|unionpay|diners|maestro|credit|debit"
    r"|\bcc\b|pan\b)|卡|银联|信用|借记|储蓄|账号|帐号|账户"
)
_OTHER_NUMBER_WORDS = re.compile(
    r"(?i:order|tracking|parcel|package|shipment|shipping|invoice|receipt|transaction|txn|ref\b|reference"
    r"|serial|imei|iccid|meid|phone|tel\b|mobile|timestamp|epoch|isbn|barcode|sku|booking|ticket|flight"
    r"|member(?:ship)?|customer|employee|student|policy|case|issue|build|commit|version|id\b|no\.)"
    r"|订单|单号|快递|运单|包裹|发票|流水|交易号|编号|序列号|条码|电话|手机|时间戳|会员|工号|学号|保单|票号|取件"
)
_CONTEXT_CHARS = 40


def luhn_ok(digits: str) -> bool:
    """Whether ``digits`` pass the Luhn (mod 10) check."""
    total = 0
    for i, char in enumerate(reversed(digits)):
        n = ord(char) - 48
        if i % 2:
            n = n * 2 - 9 if n > 4 else n * 2
        total += n
    return total % 10 == 0


def _issuer_prefix(digits: str) -> bool:
    """An issuer's prefix: Visa 4, Mastercard 51–55/2221–2720, Amex/JCB/Diners 3,
    Discover/UnionPay/Maestro 5–6."""
    return digits[0] in "3456" or 2221 <= int(digits[:4]) <= 2720


_SEPARATOR = re.compile(r"[ \-]")
# Each digit, and each digit doubled with its digits summed (Luhn), as byte values.
_PLAIN = bytes.maketrans(b"0123456789", bytes(range(10)))
_DOUBLED = bytes.maketrans(b"0123456789", bytes((2 * n - 9 if n > 4 else 2 * n) for n in range(10)))


def _luhn_sums(digits: str) -> tuple[list[int], list[int]]:
    """Prefix sums giving the Luhn total of any slice in O(1): for a slice
    ``digits[a:e]`` whose last digit sits at an index of parity ``r``,
    ``sums[r][e] - sums[r][a]`` (digits of parity ``r`` as they are, the others
    doubled). Built by the C library: no Python step per digit."""
    raw = digits.encode("ascii")
    plain, doubled = raw.translate(_PLAIN), raw.translate(_DOUBLED)
    even_kept, odd_kept = bytearray(plain), bytearray(doubled)
    even_kept[1::2], odd_kept[1::2] = doubled[1::2], plain[1::2]
    return list(accumulate(even_kept, initial=0)), list(accumulate(odd_kept, initial=0))


def _card_scan(text: str) -> Iterator[tuple[int, int]]:
    """Spans of card numbers in runs of digit groups: stretches of whole groups
    holding 13–19 digits that are Luhn-valid and whose context says "card" (or
    that have an issuer's prefix, 15–19 digits, and no word naming another kind
    of number). Overlapping spans of a run are yielded as one.

    Linear in the text, and cheap (issue 31): context words can only be in the
    40 characters before or 20 after a run (a run holds digits, spaces and
    dashes only), so the stretches near a run's ends are judged one by one with
    their context (:func:`_edge_cards`, the shortest valid stretch from each
    group, as always), and those inside it all at once, by the C library on
    bytes (:func:`_inner_cards`, every valid stretch)."""
    for run in _DIGIT_RUN.finditer(text):
        value = run.group()
        if len(value) < 13:
            continue
        digits = value.replace(" ", "").replace("-", "")
        if len(digits) < 13 or (len(digits) == len(value) and len(digits) > 19):
            continue
        found = [*_edge_cards(text, run.start(), run.end()), *_inner_cards(run.start(), value, digits)]
        yield from _merged(iter(sorted(found)))


#: Characters of a run's ends judged one by one: a stretch starting within 40
#: of the start, or ending within 20 of the end (at most 37 long), lies there.
_EDGE = 120


def _edge_cards(text: str, run_start: int, run_end: int) -> Iterator[tuple[int, int]]:
    """From each group near an end of the run (its stretches may have context
    words in reach), the shortest card stretch, judged with its context."""
    if run_end - run_start <= _EDGE * 2:
        yield from _stretches(text, run_start, run_end, run_start, run_end)
        return
    head_end = _group_end(text, run_start + _EDGE, run_end)
    yield from _stretches(text, run_start, head_end, run_start, run_end)
    tail_start = _group_start(text, run_start, run_end - _EDGE)
    yield from _stretches(text, tail_start, run_end, run_start, run_end)


def _group_end(text: str, at: int, limit: int) -> int:
    while at < limit and text[at].isdigit():
        at += 1
    return at


def _group_start(text: str, limit: int, at: int) -> int:
    while at > limit and text[at - 1].isdigit():
        at -= 1
    return at


def _stretches(text: str, part_start: int, part_end: int, run_start: int, run_end: int) -> Iterator[tuple[int, int]]:
    """The shortest valid stretch from each group of ``text[part_start:part_end]``
    (whole groups of the run ``run_start .. run_end``) that starts near the
    run's start or may end near its end."""
    groups = _SEPARATOR.split(text[part_start:part_end])
    digits = "".join(groups)
    ends = list(accumulate(map(len, groups)))  # where each group ends, in ``digits``
    sums = _luhn_sums(digits)
    count = len(groups)
    for g in range(count):
        a = ends[g - 1] if g else 0
        start = part_start + a + g  # one separator character between groups
        near_start = start - _CONTEXT_CHARS < run_start
        if not near_start and start + 37 + 20 <= run_end:
            continue  # inside: _inner_cards
        j = bisect_left(ends, a + 13, g)
        while j < count and ends[j] - a <= 19:
            e = ends[j]
            end = part_start + e + j
            total = sums[(e - 1) & 1]
            if (total[e] - total[a]) % 10 == 0:
                if near_start or end + 20 > run_end:
                    card = _card_context_ok(text, start, end, digits[a:e])
                else:
                    card = e - a >= 15 and _issuer_prefix(digits[a : a + 4])
                if card:
                    yield start, end
                    break
            j += 1


_KINDS = bytes.maketrans(b"0123456789 -", b"ddddddddddss")
_FLAG = bytes.maketrans(b"SEd", b"\x01\x01\x00")  # 1 at a group's first (S) or last (E) digit
_FIRST_OF_CARD = bytes.maketrans(b"0123456789", b"\x00\x00\x00\x01\x01\x01\x01\x00\x00\x00")  # 3, 4, 5, 6
_ISSUER_2 = re.compile(r"(?=222[1-9]|22[3-9]\d|2[3-6]\d\d|27[01]\d|2720)")
_HIT = bytes.maketrans(bytes(range(256)), b"\x01" + b"\x00" * 255)  # a zero byte: equal values


def _inner_cards(run_start: int, run: str, digits: str) -> list[tuple[int, int]]:
    """Every stretch of 15–19 digits of whole groups, wholly inside the run
    (no context word in reach), with an issuer's prefix and a valid Luhn sum,
    as merged spans of the text.

    How, without a Python step per digit: the Luhn residue of every prefix of
    the digits is a byte; a stretch ``[a, e)`` is valid exactly when the
    residues at ``a`` and ``e`` are equal (for the parity of ``e - 1``). The
    residues at valid starts (group starts with an issuer's prefix) and at
    valid ends (group ends) are compared for each length at once, as two big
    integers XORed, the other places masked with values that never match."""
    size = len(digits)
    # The first digit at 40 characters or more from the start; the end after the
    # last digit at 21 or more from the end (digits, spaces and dashes only).
    low = _CONTEXT_CHARS - run.count(" ", 0, _CONTEXT_CHARS) - run.count("-", 0, _CONTEXT_CHARS)
    cut = len(run) - 20
    high = cut - run.count(" ", 0, cut) - run.count("-", 0, cut)
    if high - low < 15:
        return []
    kinds = run.encode("ascii").translate(_KINDS)
    starts = (b"s" + kinds).replace(b"sd", b"S").translate(_FLAG)  # 1 at a group's first digit
    lasts = (kinds + b"s").replace(b"ds", b"E").translate(_FLAG)  # 1 at a group's last digit
    issuer = bytearray(digits.encode("ascii").translate(_FIRST_OF_CARD))
    for match in _ISSUER_2.finditer(digits, low, high):
        issuer[match.start()] = 1
    ones = int.from_bytes(b"\x01" * (size + 1), "big")
    # 0x80 where a stretch may not start, 0x40 where it may not end: never equal.
    start_ok = int.from_bytes(starts + b"\x00", "big") & int.from_bytes(bytes(issuer) + b"\x00", "big")
    no_start = (ones ^ start_ok) * 0x80
    no_end = (ones ^ int.from_bytes(b"\x01" + lasts, "big")) * 0x40
    sums = _luhn_sums(digits)
    covered = 0
    for parity in (0, 1):
        residues = int.from_bytes(bytes(map(operator.mod, sums[parity], repeat(10))), "big")
        as_start = (residues | no_start).to_bytes(size + 1, "big")
        as_end = (residues | no_end).to_bytes(size + 1, "big")
        for length in range(15, 20):
            span = high - length + 1 - low
            if span <= 0:
                continue
            # Starts of one parity only: the stretch's last digit (e - 1) has ``parity``.
            masked = bytearray(as_start[low : low + span])
            wrong = (parity + 1 - length - low + 1) & 1  # first index, in ``masked``, of the other parity
            masked[wrong::2] = b"\x80" * len(range(wrong, span, 2))
            equal = (int.from_bytes(masked, "big") ^ int.from_bytes(as_end[low + length : high + 1], "big")).to_bytes(
                span, "big"
            )
            hits = int.from_bytes(bytes(low) + equal.translate(_HIT) + bytes(size + 1 - low - span), "big")
            if hits:
                covered |= _widened(hits, length)
    if not covered:
        return []
    spans = []
    separators, counted = 0, 1  # separators before digit ``counted`` (group starts after the first)
    for mark in re.finditer(b"\x01+", covered.to_bytes(size + 1, "big")):
        first, last = mark.start(), mark.end() - 1
        separators += starts.count(1, counted, first + 1)
        begin = run_start + first + separators
        separators += starts.count(1, first + 1, last + 1)
        counted = last + 1
        spans.append((begin, run_start + last + separators + 1))
    return spans


def _widened(hits: int, length: int) -> int:
    """Byte flags at ``k`` widened to ``k .. k + length - 1`` (big-endian: to the right)."""
    two = hits | hits >> 8
    four = two | two >> 16
    eight = four | four >> 32  # k .. k + 7
    wide = eight if length <= 16 else eight | eight >> 64  # k .. k + 7, or k .. k + 15
    return wide | eight >> 8 * (length - 8)  # and k + length - 8 .. k + length - 1


def _merged(spans: Iterator[tuple[int, int]]) -> Iterator[tuple[int, int]]:
    """Overlapping spans as one (they come in order of their starts)."""
    current: tuple[int, int] | None = None
    for start, end in spans:
        if current is not None and start <= current[1]:
            current = (current[0], max(current[1], end))
            continue
        if current is not None:
            yield current
        current = (start, end)
    if current is not None:
        yield current


def _card_context_ok(text: str, start: int, end: int, digits: str) -> bool:
    before = text[max(0, start - _CONTEXT_CHARS) : start]
    after = text[end : end + 20]
    if _CARD_WORDS.search(before) or _CARD_WORDS.search(after):
        return True
    return (
        15 <= len(digits) <= 19
        and _issuer_prefix(digits)
        and not _OTHER_NUMBER_WORDS.search(before)
        and not _OTHER_NUMBER_WORDS.search(after)
    )


# --- identity numbers -------------------------------------------------------

# Led by its first digit, as _DIGIT_RUN.
_CN_ID = re.compile(r"[1-8](?<![0-9A-Za-z].)\d{5}[ \-]?(?:18|19|20)\d{2}[01]\d[0-3]\d[ \-]?\d{3}[0-9Xx](?![0-9A-Za-z])")
_CN_ID_WEIGHTS = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)


def cn_id_ok(value: str) -> bool:
    """An 18-character Chinese resident identity number: check digit and birth date."""
    chars = value.replace(" ", "").replace("-", "").upper()
    if len(chars) != 18 or not chars[:17].isdigit():
        return False
    check = "10X98765432"[sum(int(c) * w for c, w in zip(chars, _CN_ID_WEIGHTS, strict=False)) % 11]
    if chars[17] != check:
        return False
    try:
        born = date(int(chars[6:10]), int(chars[10:12]), int(chars[12:14]))
    except ValueError:
        return False
    return date(1890, 1, 1) <= born <= date.today()


def _cn_id_scan(text: str) -> Iterator[tuple[int, int]]:
    for match in _CN_ID.finditer(text):
        if cn_id_ok(match.group()):
            yield match.span()


def _named(words: str, value: str, gap: int = 24) -> str:
    """A pattern: one of ``words``, up to ``gap`` characters without digits, then ``value``."""
    return rf"(?:{words})[^\n\d]{{0,{gap}}}?(?<![A-Za-z0-9])(?P<secret>{value})(?![A-Za-z0-9])"


_NAMED_ID = _named(
    r"身份证|证件号|身份号码|公民身份|(?i:\bid\b|identity card|national id|resident id)", r"\d{17}[\dXx]|\d{15}"
)
_PASSPORT = _named(r"(?i:passport|travel document)|护照|通行证|回乡证|台胞证", r"[A-Za-z]{1,2}[ \-]?\d{6,9}|\d{8,9}")
_SSN = _named(r"(?i:\bssn\b|social security)|社保号|社会保障号", r"\d{3}[ \-]?\d{2}[ \-]?\d{4}") + (
    r"|(?<![\d\-])(?P<secret2>(?!000|666|9)\d{3}-(?!00)\d{2}-(?!0000)\d{4})(?![\d\-])"
)
_ACCOUNT = _named(
    r"(?i:bank account|account (?:number|no\.?)|routing number|\biban\b|sort code)"
    r"|银行账号|银行卡号|卡号|账户号|开户行账号",
    r"[A-Z]{0,2}\d[\d ]{6,32}\d",
)
_CVV = r"(?i:\bcvv2?\b|\bcvc2?\b|\bcsc\b|card security code)|安全码|卡背面的?(?:三|3)位(?:数字|数)?"
_CVV_RULE = rf"(?:{_CVV})[^\n\d]{{0,12}}?(?P<secret>\d{{3,4}})(?!\d)"


def _named_id_ok(match: re.Match[str]) -> bool:
    """A named identity number needs a real birth date (positions 7–14, or 7–12
    of an old 15-digit one); the check digit may be wrong (a typo is still an id)."""
    value = match.group("secret")
    try:
        if len(value) == 18:
            born = date(int(value[6:10]), int(value[10:12]), int(value[12:14]))
        else:
            born = date(1900 + int(value[6:8]), int(value[8:10]), int(value[10:12]))
    except ValueError:
        return False
    return date(1890, 1, 1) <= born <= date.today()


def _passport_ok(match: re.Match[str]) -> bool:
    value = match.group("secret")
    if value.isdigit() and len(value) == 8:
        try:  # "renewed my passport on 20240315" is a date
            date(int(value[:4]), int(value[4:6]), int(value[6:]))
            return False
        except ValueError:
            return True
    return True


# --- one-time codes ---------------------------------------------------------

# The words that name a code ("door", "one-time", "2fa"): fourteen letters at most.
_CODE_NAMES = (
    r"verification|verify|security|confirmation|login|log[ \-]?in|sign[ \-]?in|access|auth"
    r"|authentication|authori[sz]ation|one[ \-]?time|otp|sms|text|2fa|mfa|totp|two[ \-]?factor"
    r"|activation|unlock|door|gate|alarm|lock|keypad|entry|garage|safe|building|bank|backup|recovery"
    r"|atm|debit|credit|card|sim|voicemail|locker|padlock|combination"
    r"|authenticator|google|microsoft|apple|wechat|alipay|telegram|whatsapp|signal|uber|facebook|instagram"
    r"|twitter|tiktok|discord|steam|amazon|paypal|github|slack|zoom|taobao|jd|weibo|qq"
)
_CODE_WORDS = (
    r"(?:" + _CODE_NAMES + r")"
    r"[ \-]?(?:code|pin|passcode|password)s?"
    r"|one[ \-]?time[ \-]?pass(?:word|code)?|\botp\b|\b2fa\b|\bmfa\b|\btotp\b"
)
_NOT_SECRET_CODES = frozenset(
    [
        "zip",
        "postal",
        "post",
        "postcode",
        "area",
        "country",
        "region",
        "dial",
        "error",
        "status",
        "exit",
        "return",
        "http",
        "response",
        "promo",
        "promotion",
        "discount",
        "coupon",
        "voucher",
        "gift",
        "referral",
        "invite",
        "invitation",
        "product",
        "item",
        "sku",
        "model",
        "color",
        "colour",
        "hex",
        "source",
        "bar",
        "qr",
        "morse",
        "dress",
        "tracking",
        "order",
        "booking",
        "reservation",
        "flight",
        "course",
        "class",
        "airport",
        "iata",
        "language",
        "currency",
        "style",
        "cheat",
        "op",
        "unicode",
        "ascii",
        "char",
        "character",
        "tax",
        "diagnosis",
        "icd",
        "pickup",
        "pick-up",
        "shipping",
        "parcel",
        "fare",
        "seat",
        "room",
        "station",
        "stock",
        "ticker",
        "fund",
        "postal",
        "source",
        "python",
        "java",
        "sample",
        "example",
        "test",
        "program",
        "programme",
        "computer",
        "machine",
        "meeting",
        "conference",
        "event",
        "game",
        "lobby",
        "share",
        "sharing",
        "group",
        "team",
        "channel",
        "classroom",
        "friend",
    ]
)
_WORD_BEFORE = re.compile(r"([A-Za-z\-]+)[ \t]*$")


def _code_value(group: str) -> str:
    """A code after its words: 4–8 digits (one space or dash inside) or 6–8 letters and
    digits, not followed by a unit ("2048 lines", "5 分钟"). The look-aheads for a
    digit and a letter read no further than the code can be long (a run of
    letters after every keyword of "passwordpassword…" was read to its end)."""
    return (
        r"[ \t]*[\"'“‘]?(?:G-)?(?P<" + group + r">\d{3,4}[ \-]?\d{1,4}|\d(?:[ \-]\d){3,7}"
        r"|(?=[A-Za-z]{0,7}\d)(?=\d{0,7}[A-Za-z])[A-Za-z0-9]{6,8}|(?=[A-Za-z\-]{0,10}\d)[A-Za-z0-9]{3,5}-[A-Za-z0-9]{3,5})"
        r"(?![A-Za-z0-9\-])(?![ \t]*(?:%|(?i:minutes?|mins?|seconds?|secs?|hours?|days?|weeks?|months?|years?"
        r"|lines?|bytes?|characters?|chars?|digits?|times?|people|px|ms|kb|mb|gb|pages?|words?|steps?|items?"
        r"|dollars?|usd|rmb|yuan))\b|[ \t]*[元块位分秒小时天次个页行字岁号])"
    )


_CODE_CONNECTOR = (
    r"(?:[ \t]+(?:for|to|of|on)[ \t]+(?:the[ \t]+|my[ \t]+|our[ \t]+|your[ \t]+)?[\w\-]+)?"
    r"(?:[ \t]*(?::|=|-|：)|[ \t]+(?:is|was|will[ \t]+be|are|reads|says)(?:[ \t]+(?:now|still|just))?"
    r"(?:[ \t]*:)?|[ \t]*(?:是|为|為))?"
)
_OTP = (
    rf"(?i:(?<![A-Za-z])(?:{_CODE_WORDS}))" + _CODE_CONNECTOR + _code_value("secret") + r"|(?<![A-Za-z])(?i:code|pin)\b"
    r"(?i:[ \t]+(?:for|to|of|on)[ \t]+(?:the[ \t]+|my[ \t]+|our[ \t]+)?[\w\-]+)?"
    r"(?:[ \t]*(?::|=|：)|[ \t]+(?i:is|was)(?:[ \t]*:)?)"
    + _code_value("secret2")
    + r"|(?<![0-9A-Za-z])(?:G-)?(?P<secret3>\d{4,8})[ \t]*(?i:is|为|是)[ \t]*(?i:your|您的|你的|the)[ \t]*"
    r"(?:[\w\-]+[ \t]+){0,2}?(?i:code|otp|passcode|pin|验证码|动态码|校验码)"
)


def _otp_ok(match: re.Match[str]) -> bool:
    """Four digits at least (two in a code with letters): "error code is 404" or a
    3-digit area code is not a secret."""
    value = match.group("secret") or match.group("secret2") or match.group("secret3") or ""
    digits = sum(c.isdigit() for c in value)
    if digits < (2 if any(c.isalpha() for c in value) else 4):
        return False  # "error code is 404"; a code of letters wants two digits at least
    if match.group("secret2"):
        # "zip code is 10001", "error code: 5003": "code" named by a word that
        # is not about a secret.  A bare "code is 4821" or "door code" passes.
        word = _WORD_BEFORE.search(match.string, max(0, match.start() - 30), match.start())
        if word is not None and word.group(1).lower() in _NOT_SECRET_CODES:
            return False
    return True


# Where a one-time code can begin: the big pattern above, tried at every
# position, cost 1.1 s a megabyte of "code is 1 1 1 …" (issue 31). Its first
# two alternatives hold a keyword (code, pin, pass…, otp, 2fa, mfa) right
# after their code word ("authentication code", "log-in pin", "totp"): letters,
# spaces and dashes, 15 characters at most; the third starts with the digits
# before "is" or 为/是.
_CODE_LEAD_MAX = 20  # characters, from a match's start to its keyword (15 at most) with room to spare
# The letters, spaces and dashes that end where a search stops (its ``endpos``):
# always found, empty at worst. (?i): "ı" is an "i" to the pattern too.
_LEAD_BACK = re.compile(r"(?:(?i:[a-z])|[ \-])*+\Z")
_LEAD_SEPARATOR = re.compile(r"[ \-]")


def _backwards(pattern: str) -> str:
    """An alternation of words (letters, and classes such as ``[ \\-]?``) spelt backwards."""
    return "|".join("".join(reversed(re.findall(r"\[[^\]]*\]\??|.", word))) for word in pattern.split("|"))


# A code word, and a space or dash or nothing, ending where a keyword starts,
# read backwards on the folded text (:func:`~memjobs_client.sensitive.rules.folded`,
# as ``(?i)``). Every match of :data:`_OTP` that begins before its keyword
# ("door code", "one-time pass", "2fa code") holds one there; one that begins
# at its keyword ("code: 1234", "otp 123456", "pin is 0000") is :data:`_SELF_LED`;
# a keyword with neither leads no match (issue 31: each word before each
# keyword of "abcd1234 is my password …" was tried, 0.3 s a megabyte).
_NAMED_BEFORE = re.compile(r"[ \-]?(?:" + _backwards(_CODE_NAMES) + ")")
# Led by its first character, a "G" or a digit (the engine skips to one; a
# pattern opening with a look-behind is tried at every position), which it
# consumes: the next position, after a letter or digit, cannot begin one.
_DIGITS_FIRST = re.compile(r"[G\d](?<![0-9A-Za-z].)(?<=(?=(?:G-)?\d{4,8}[ \t]*(?i:is|为|是)).)")


def _otp_starts(text: str) -> Iterator[int]:
    """Every position where :data:`_OTP` can begin (and a few where it cannot):
    each word start in a keyword's lead, the keyword itself, and digits
    before "is"; nearly in order (:data:`_CODE_LEAD_MAX` characters back at most)."""
    return heapq.merge(_lead_starts(text), (start.start() for start in _DIGITS_FIRST.finditer(text)))


# What follows a keyword in every match of the first two alternatives of
# :data:`_OTP`: the keyword's word, ending as a code word ends ("passcode",
# "password"; "2fa code", "otp pin"), then a connector and a code. A keyword
# where it does not match begins no match and leads to none (issue 31: the
# Python step per keyword of ``password=x password=x …`` cost 0.27 s a megabyte).
_CODE_TAIL = re.compile(
    r"(?i:(?:passcode|password|pass|code|pin|otp|2fa|mfa)(?:word|code)?"
    r"(?:[ \-]?(?:code|pin|passcode|password))?s?)"
    r"(?:"
    + _CODE_CONNECTOR
    + _code_value("a")
    + r"|(?i:[ \t]+(?:for|to|of|on)[ \t]+(?:the[ \t]+|my[ \t]+|our[ \t]+)?[\w\-]+)?"
    r"(?:[ \t]*(?::|=|：)|[ \t]+(?i:is|was)(?:[ \t]*:)?)" + _code_value("b") + ")"
)


def _last_letters(names: str) -> str:
    """A character class: the last character of each of the words of ``names``,
    in either case, and what a pattern's ``(?i)`` takes for them (the long s,
    the Kelvin sign: :func:`~memjobs_client.sensitive.rules.folded`)."""
    last = {re.findall(r"\[[^\]]*\]\??|.", word)[-1] for word in names.split("|")}
    assert all(len(char) == 1 for char in last), last
    chars = {*last, *(char.upper() for char in last)}
    chars |= {"\u017f"} if "s" in chars else set()
    chars |= {"\u212a"} if "k" in chars else set()
    return "[" + "".join(sorted(chars)) + "]"


# A match that begins at its keyword: "otp", "2fa" or "mfa" first (the first
# alternative), or "code" or "pin" with a connector (the second). Any other
# begins with a code word before the keyword ("door code", "one-time pass"),
# so a letter, or a letter and a space or dash, stands right before it.
_SELF_LED = re.compile(
    r"(?i:otp|2fa|mfa)|(?i:code|pin)\b(?i:[ \t]+(?:for|to|of|on)[ \t]+(?:the[ \t]+|my[ \t]+|our[ \t]+)?[\w\-]+)?"
    r"(?:[ \t]*(?::|=|：)|[ \t]+(?i:is|was)(?:[ \t]*:)?)" + _code_value("c")
)


# The keywords (their first letter, in either case) that can lead a match,
# found by the C library alone (the first letter leads the search): a code
# word's last letter right before, or a space or dash and such a letter before
# it (:data:`_NAMED_BEFORE`), or a match of :data:`_SELF_LED` (read here:
# without a code word before it a keyword leads a match only so, and "… pin
# 9012 …" with no connector, thousands of them, is not looked at in Python);
# atomic, so each is tried once. A keyword after a number
# or a value ("hunter22 password=…", "1234 pin") is not looked at, and the tail
# (:data:`_CODE_TAIL`) is read only after the code word or the self-led match
# is found (issue 31: the tail of each keyword of a text of secrets was read in
# each round of a redaction, and of each of ``codepincodepin…1``: 0.6 s a
# megabyte).
_NAME_END = _last_letters(_CODE_NAMES)
_CODE_KEYWORD = re.compile(
    r"[cpo2mCPOM](?>(?<=" + _NAME_END + r".)|(?<=" + _NAME_END + r"[ \-].)|(?<=(?=" + _SELF_LED.pattern + r").))"
    r"(?<=(?=(?i:passcode|password|pass|code|pin|otp|2fa|mfa)).)"
)


def _lead_starts(text: str) -> Iterator[int]:
    """Word starts in each keyword's lead, and the keyword: at most
    :data:`_CODE_LEAD_MAX` characters before a position yielded earlier."""
    self_led = _SELF_LED.match
    named_before = _NAMED_BEFORE.match
    tail = _CODE_TAIL.match
    backwards, size = folded(text)[::-1], len(text)
    for keyword in _CODE_KEYWORD.finditer(text):
        at = keyword.start()
        if not (named_before(backwards, size - at) or self_led(text, at)) or tail(text, at) is None:
            continue  # "password 1234", "abcd1234 is my password": no code word before it, no match it leads
        yield at
        # Back from the keyword over letters, spaces and dashes, found by the C
        # library: each position after a space or dash, and where the lead begins.
        begin = _LEAD_BACK.search(text, max(0, at - _CODE_LEAD_MAX), at).start()  # type: ignore[union-attr]
        for separator in _LEAD_SEPARATOR.finditer(text, begin, at):
            yield separator.end()
        yield begin


_SSN_SCAN = regex_scanner(_SSN)
_SSN_WORDS = ("ssn", "social", "社保", "社会保障")
# A number in the shape of a social security number, unnamed (the second
# alternative of :data:`_SSN`).
_SSN_SHAPE = re.compile(r"\d{3}-\d{2}-\d{4}")


def _ssn_scan(text: str) -> Iterator[tuple[int, int]]:
    """:data:`_SSN`'s matches, looked for only when the text names one (its
    first alternative) or holds one's shape (the second). A dash alone no
    longer wakes the pattern tried at every position (issue 31: a Markdown
    list's dashes cost 0.1 s a megabyte)."""
    fold = folded(text)
    if any(word in fold for word in _SSN_WORDS) or ("-" in fold and _SSN_SHAPE.search(text) is not None):
        return _SSN_SCAN(text)
    return iter(())


_CODE_GATE = ("code", "pin", "otp", "2fa", "mfa", "pass", "码", "碼", "口令")

# "admin / admin123456", "root/toor2024": a user name, a slash and a password.
_LOGIN_PAIR = (
    r"(?<![\w/.~\-])(?i:admin|administrator|root|sa|guest|user|管理员)[ \t]*/[ \t]*"
    r"(?P<secret>(?=[!#-.0-~]*[\d!@#$%^&*])[!#-.0-~]{4,40})(?![!#-~])"
)

NUMBER_RULES: tuple[TextRule, ...] = (
    TextRule("card_number", "bank or credit card number", needs(_card_scan, DIGIT), False),
    TextRule("cn_resident_id", "Chinese resident identity number", needs(_cn_id_scan, DIGIT), False),
    TextRule(
        "named_id_number",
        "identity number named as one",
        needs(
            gated(
                regex_scanner(_NAMED_ID, accept=_named_id_ok), "身份", "证件", "id", "identity", "national", "resident"
            ),
            DIGIT,
        ),
        False,
    ),
    TextRule(
        "social_security_number",
        "social security number",
        needs(_ssn_scan, DIGIT),
        False,
    ),
    TextRule(
        "passport_number",
        "passport or travel document number",
        needs(
            gated(
                regex_scanner(_PASSPORT, accept=_passport_ok),
                "passport",
                "travel",
                "护照",
                "通行证",
                "回乡证",
                "台胞证",
            ),
            DIGIT,
        ),
        False,
    ),
    TextRule(
        "bank_account",
        "bank account number",
        needs(gated(regex_scanner(_ACCOUNT), "account", "iban", "routing", "sort code", "账", "帐", "卡号"), DIGIT),
        False,
    ),
    TextRule(
        "card_security_code",
        "card security code (CVV)",
        needs(gated(regex_scanner(_CVV_RULE), "cvv", "cvc", "csc", "security", "安全码", "卡背面"), DIGIT),
        False,
    ),
    TextRule(
        "login_pair",
        "user name and password pair",
        gated(regex_scanner(_LOGIN_PAIR), "admin", "root", "sa", "guest", "user", "管理员"),
        False,
    ),
    TextRule(
        "one_time_code",
        "one-time, verification or access code",
        needs(gated(anchored_scanner(_OTP, _otp_starts, slack=_CODE_LEAD_MAX, accept=_otp_ok), *_CODE_GATE), DIGIT),
        False,
    ),
)
"""All but the login pair hold a digit in every match (:func:`~memjobs_client.sensitive.rules.needs`):
a text without one (a redaction's second round over text whose numbers are
markers now, above all) is not read for them."""
