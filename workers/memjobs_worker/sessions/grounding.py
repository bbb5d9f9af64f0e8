"""Is a proposed patch the user's own words? The grounding rule of consolidation.

The seeds: automatic consolidation writes only what the user stated or asked
for, and never guesses a form of address or a reply preference. A patch is
*grounded* when all of these hold (``docs/sessions.md``, "The grounding rule"):

1. **Evidence from the user.** Its ``evidence`` (at least 2 characters after
   normalisation) is a substring of one *user* turn of this session. Text is
   compared after NFKC, case folding and punctuation removal.
2. **Substance covered by the evidence.** The patch's text (``new_text`` for a
   replacement), after removing Markdown, a short leading label (``称呼：``,
   ``Name:``) and frame words (``user``, ``lives``, ``用户``, ``喜欢`` …), is cut
   into content units: English words (crudely stemmed, stop words dropped) and
   CJK bigrams (a lone CJK character counts as a unit). At least
   :data:`COVERAGE` of the units must occur in the evidence; every number and
   time word must; a frame that states something (lives, works, likes, is a)
   needs its kind of word in the evidence; evidence about someone else ("my dad
   is …", "我表弟…", "my friend's …") needs the patch to name them.
3. **No changed stance.** A hedge (``可能``, ``probably`` …) or a negation
   (``不``, ``not`` …) is in both the patch and the evidence or in neither:
   "I don't like coffee" never becomes "likes coffee", "我可能去" never "去".
4. **Address and reply preferences only when the user said so.** A patch about
   how to address the user needs evidence asking for it (``叫我``, ``call me``,
   or a request that names the address: "please use my nickname"); a patch to
   USER.md or about how to reply needs a request (``请``, ``以后``, ``please``,
   ``from now on`` …) or a stated preference about replies ("I prefer short
   answers", "我喜欢你回答简短").
5. **Deletions only when asked.** A replacement with empty ``new_text``
   needs evidence asking to forget or correct (``忘掉``, ``记错``, ``forget`` …).

:func:`grounded` returns ``None`` when the patch passes, else a short reason
code for the audit log (never text).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from memjobs_worker.sessions import grounding_lexicon as lex
from memjobs_worker.text import fold, grams, nfkc

#: Share of a patch's content units that its evidence must contain.
COVERAGE = 0.75


def normalise(text: str) -> str:
    """NFKC, case-folded, punctuation and symbols turned to spaces, whitespace collapsed."""
    text = fold(text).replace("\u2019", "'")
    kept = [c if (c.isalnum() or c == "'") else " " for c in text]
    return " ".join("".join(kept).split())


def grounded(
    doc: str, text: str, evidence: str | None, user_turns: Sequence[str], *, deletion: bool = False
) -> str | None:
    """``None`` when the patch is grounded in ``evidence`` said in ``user_turns``;
    otherwise the reason: ``not_grounded`` (evidence missing or not the user's),
    ``not_covered`` (the patch says more than the evidence), ``not_requested``
    (address, reply preference or deletion without an explicit request)."""
    parts = [normalise(p) for p in lex.ELLIPSIS.split(evidence or "")]
    parts = [p for p in parts if p]
    said = " ".join(parts)
    if len(said.replace(" ", "")) < 2 or not _quoted(parts, user_turns):
        return "not_grounded"
    if deletion:
        return None if _has(said, lex.FORGET) else "not_requested"
    content = _strip(text)
    if not _covered(content, said) or not _same_stance(content, said):
        return "not_covered"
    stated = normalise(text)
    if _has(stated, lex.ADDRESS):
        asked = _has(said, lex.ADDRESS_REQUESTS) or (_has(said, lex.REQUESTS) and _has(said, lex.ADDRESS_WORDS))
        return None if asked else "not_requested"
    if doc == "USER.md" or _has(stated, lex.REPLY):
        asked = _has(said, lex.REQUESTS) or (_has(said, lex.PREFERS) and _has(said, lex.REPLY))
        return None if asked else "not_requested"
    return None


def _quoted(parts: Sequence[str], user_turns: Sequence[str]) -> bool:
    """Every part of the quote (parts split by an ellipsis) is in one user turn."""
    turns = [normalise(t) for t in user_turns]
    return all(any(part in turn for turn in turns) for part in parts)


def _strip(text: str) -> str:
    """The patch's words without Markdown, a leading label or line markers."""
    lines = []
    for line in nfkc(text).splitlines():
        line = lex.MARKDOWN.sub(" ", line)
        line = lex.LABEL.sub(" ", line)
        lines.append(line)
    return normalise(" ".join(lines))


def units(content: str) -> list[str]:
    """Content units of normalised text: stemmed English words and CJK bigrams."""
    out: list[str] = []
    for match in lex.UNIT.finditer(content):
        token = match.group()
        if token[0] >= "\u3400":
            for run in lex.FRAME_ZH_RE.split(token):
                out.extend(grams(run))
        elif token not in lex.STOP_EN and token not in lex.FRAME_EN and token not in lex.NEGATIONS_EN:
            out.append(_stem(token))
    return out


def _covered(content: str, said: str) -> bool:
    content, said = _kin(_arabic(content)), _kin(_arabic(said))
    wanted = units(content)
    if not wanted:
        return False
    words = {_stem(w) for w in lex.UNIT.findall(said) if not (w[0] >= "\u3400")}
    cjk = " ".join(w for w in lex.UNIT.findall(said) if w[0] >= "\u3400")
    hits = sum(1 for u in wanted if (_in_cjk(u, cjk) if u[0] >= "\u3400" else u in words))
    exact = (
        set(lex.NUMBER.findall(content)) <= set(lex.NUMBER.findall(said))
        and all(w in said for w in lex.EXACT_ZH.findall(content))
        # "一个" may stand for "a", but not where the evidence counted otherwise
        and not any(
            re.search(f"[{lex.NUMERALS}\\d]{m}", said) and f"一{m}" not in said for m in lex.ONE_OF.findall(content)
        )
    )
    framed = all(
        _has(said, needed) or (kind == "like" and _has(said, lex.REQUESTS))
        for kind, frames, needed in lex.GROUPS
        if _has(content, frames)
    )
    if lex.IDENTITY.match(content) and not _has(said, lex.COPULAS):
        return False
    if lex.NAME_CLAIM.match(content) and not _has(said, lex.NAMING):
        return False
    if (
        (subject := _subject(said)) is not None
        and subject not in content
        and _kin(subject) not in _kin(content)
        and subject not in units(content)
    ):
        return False
    for match in lex.OTHERS.finditer(said):
        whose = match.group(1) or match.group(2)
        if whose not in content and _stem(whose) not in units(content):
            return False
    return exact and framed and hits / len(wanted) >= COVERAGE


def _subject(said: str) -> str | None:
    """The person the evidence is about when it is not the user: "my dad …", "我表弟…"."""
    words = said.split()
    first = words[1] if len(words) > 1 and words[0] in ("my", "our") else (words[0] if words else "")
    if first in lex.PERSONS_EN or first.removesuffix("s") in lex.PERSONS_EN:
        return first
    match = lex.PERSON_ZH.match(said)
    return match.group(1) if match else None


def _in_cjk(unit: str, cjk: str) -> bool:
    """A CJK unit is in the evidence: a lone character anywhere, a bigram with at
    most two characters between its halves ("上三年级" in "上小学三年级")."""
    if len(unit) == 1:
        return unit in cjk
    first, second = unit[0], unit[1]
    start = cjk.find(first)
    while start != -1:
        if second in cjk[start + 1 : start + 4].split(" ")[0]:
            return True
        start = cjk.find(first, start + 1)
    return False


def _arabic(text: str) -> str:
    """Small Chinese and English numbers as digits ("五月三号" → "5月3号", "two" → "2")."""
    text = lex.ZH_NUMBER.sub(_zh_digits, text)
    return " ".join(lex.EN_NUMBERS.get(w, w) for w in text.split(" "))


def _zh_digits(match: re.Match[str]) -> str:
    numeral = match.group(1)
    if numeral == "一" and match.string[match.end()] in "点个位只条次":
        return numeral  # "a bit", "a" (一只猫): checked by lex.ONE_OF instead
    tens, ten, ones = numeral.partition("十")
    try:
        if not ten:
            return "".join(str(lex.ZH_DIGITS[c]) for c in numeral)
        value = (lex.ZH_DIGITS[tens] if tens else 1) * 10 + (lex.ZH_DIGITS[ones] if ones else 0)
    except KeyError:  # "十十", "二三十": not a number this handles
        return numeral
    return str(value) if len(tens) <= 1 and len(ones) <= 1 else numeral


def _kin(text: str) -> str:
    for pattern, canonical in lex.KIN:
        text = pattern.sub(canonical, text)
    return text


def _same_stance(content: str, said: str) -> bool:
    if _has(content, lex.HEDGES) != _has(said, lex.HEDGES):
        return False  # a guess stated as a fact, or a fact turned into a guess
    return _negated(content) == _negated(said)


def _negated(text: str) -> bool:
    words = set(text.split())
    text = lex.NOT_NEGATIONS_ZH.sub(" ", text)
    return bool(words & lex.NEGATIONS_EN) or any(n in text for n in lex.NEGATIONS_ZH)


def _has(text: str, needles: Iterable[str]) -> bool:
    """Whether a needle occurs: CJK anywhere, English only as whole words."""
    padded = f" {text} "
    for needle in needles:
        if needle[0] >= "\u3400":
            if needle in text:
                return True
        elif f" {needle} " in padded:
            return True
    return False


def _stem(word: str) -> str:
    """A crude English stem, applied to patch and evidence alike ("moved"/"moving"/"move"
    → "mov", "commutes"/"commute" → "commut", "allergic"/"allergy" → "allerg")."""
    word = lex.IRREGULAR.get(word, word).removesuffix("'s").replace("'", "")
    if word.endswith("ies") and len(word) > 4:
        word = word[:-3] + "y"
    else:
        for suffix in ("ing", "ed", "es", "s"):
            if word.endswith(suffix) and len(word) - len(suffix) >= 3 and not word.endswith("ss"):
                word = word[: -len(suffix)]
                break
    for suffix in ("e", "ic", "y"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word
