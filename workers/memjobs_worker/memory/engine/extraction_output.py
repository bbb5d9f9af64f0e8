"""The chat model mem0 is given: only replies mem0 will use as intended get through.

Why: mem0 (2.2.1, ``Memory._add_to_vector_store``) parses the extraction reply
itself and, on any problem — prose, JSON without ``"memory"``, a list of the
wrong things — logs an error and carries on as if the model had found no
facts. The sources would then be marked learned with nothing learned and no
reason anywhere. So the model handed to mem0 is wrapped: a reply is checked
here with the shape mem0 expects, a malformed one is asked again once at once
(:func:`memjobs_worker.model_output.ask_json`, the session-end jobs' path), and
then :class:`~memjobs_worker.model_output.ModelOutputInvalid` is raised. mem0
re-raises a model error as its ``LLMError`` chained to ours, and the engine's
error translation finds ours in the chain, so the pipeline sees it as itself
and records the batch's sources as ``failed`` with the reason.

A model that is down still raises ``ModelUnavailable`` from the model client,
untouched here: the job is retried with backoff.

What mem0 gets back is the checked reply re-serialised, not the model's text:
what mem0 parses is exactly what was checked here (no second opinion on
fences, ``<think>`` blocks or stray text).
"""

from __future__ import annotations

import json
import re
from typing import Any

from memjobs_worker.model_client import ChatModel
from memjobs_worker.model_output import (
    OUTPUT_ATTEMPTS,
    ModelOutputInvalid,
    ask_json,
    parse_json_object,
)

#: The shape reminded to the model when its reply could not be used.
FACTS_SHAPE = '{"memory": [{"text": "a fact about the user"}]} (or {"memory": []} for none)'

# Reasoning models put their thoughts before the answer; mem0 strips them too.
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL)


def parse_facts_reply(reply: str) -> dict[str, Any]:
    """The extraction reply as mem0 will use it: a JSON object (code fences and
    ``<think>`` blocks tolerated, as mem0 tolerates them) whose ``"memory"`` is
    a list of objects, each with a non-empty string ``"text"``. An empty list is
    a valid answer: no facts.

    Raises:
        ModelOutputInvalid: anything else; the message says what, never the reply.
    """
    data = parse_json_object(_THINK.sub("", reply) if isinstance(reply, str) else reply)
    facts = data.get("memory")
    if not isinstance(facts, list):
        raise ModelOutputInvalid("the reply has no list 'memory'")
    for fact in facts:
        if not isinstance(fact, dict):
            raise ModelOutputInvalid("an item of 'memory' is not an object")
        text = fact.get("text")
        if not isinstance(text, str) or not text.strip():
            raise ModelOutputInvalid("an item of 'memory' has no non-empty string 'text'")
    return data


class CheckedExtractionModel:
    """mem0's LLM interface (``generate_response``) around a :class:`ChatModel`,
    passing on only well-formed extraction replies.

    Parameters:
        model: the light model (the model client: timeouts, retries, metrics).
        attempts: model calls per extraction when the replies are malformed.
    """

    def __init__(self, model: ChatModel, *, attempts: int = OUTPUT_ATTEMPTS) -> None:
        self.model = model
        self.attempts = attempts

    def generate_response(self, messages: list[dict[str, str]], response_format: Any = None, **kwargs: Any) -> str:
        """The reply, checked and re-serialised.

        Raises:
            ModelUnavailable: the model service failed (transient).
            ModelOutputInvalid: ``attempts`` replies in a row were malformed.
        """
        data = ask_json(self.model, messages, parse_facts_reply, shape=FACTS_SHAPE, attempts=self.attempts)
        return json.dumps(data, ensure_ascii=False)
