"""Request bodies parsed strictly: a JSON object that names a key twice is refused.

What: :class:`JsonRoute`, the route class of every router with a JSON body
(``APIRouter(route_class=JsonRoute)``); it hands FastAPI a request whose
``json()`` parses with an ``object_pairs_hook`` that refuses a repeated key, at
any depth, with a ``validation`` problem (422) naming the key when it is one of
the API's own field names (a key the caller made up may be their text).

Why: Python's ``json`` keeps the last of two equal keys, another parser the
first: ``{"owner_id": "alice", "owner_id": "carol"}`` means one owner to a
gateway or proxy that checked it and another to this server. A body that can be
read two ways is not read at all. The hook costs one ``dict`` comparison per
object, in the one parse FastAPI already does.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import HTTPException, Request, Response
from fastapi.routing import APIRoute

from memjobs_worker.http.auth import CROSS_OWNER, Need, authorize
from memjobs_worker.http.problems import problem_response
from memjobs_worker.http.schemas import known_fields

_SAFE_KEY = re.compile(r"^[a-z_]{1,40}$")


class DuplicateKey(HTTPException):
    """A JSON object of the body names ``key`` more than once."""

    def __init__(self, key: str) -> None:
        super().__init__(status_code=422)
        self.key = key


def unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook``: the object as a dict, unless a key repeats.

    Raises:
        DuplicateKey: naming the first key that repeats.
    """
    found = dict(pairs)
    if len(found) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKey(key)
            seen.add(key)
    return found


def loads(body: bytes | str) -> Any:
    """``json.loads`` that refuses an object with a repeated key (:class:`DuplicateKey`)."""
    return json.loads(body, object_pairs_hook=unique_pairs)


def duplicate_detail(key: str) -> str:
    """The problem's detail: the key named only when it is one of the API's fields."""
    named = key if key in known_fields() and _SAFE_KEY.match(key) else "a key"
    return f"body: {named} appears more than once in one object; name each key once"


class StrictJsonRequest(Request):
    """A request whose JSON body is parsed by :func:`loads`."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = loads(await self.body())
        return self._json


def declared_need(route: APIRoute) -> Need | None:
    """The :class:`~memjobs_worker.http.auth.Need` a route declares (``needs(...)``, on
    the route or its router); None when it declares none.

    Raises:
        ValueError: the route declares two (a scope is declared once).
    """
    found = [d.dependency for d in route.dependencies if isinstance(d.dependency, Need)]
    if len(found) > 1:
        raise ValueError(f"{route.path_format} declares {len(found)} scopes; declare one")
    return found[0] if found else None


class JsonRoute(APIRoute):
    """The route class of the API's routers: bodies parsed by :class:`StrictJsonRequest`,
    after the route's declared scope and owner are checked (:func:`~memjobs_worker.http.auth.authorize`:
    a refusal comes before the body is parsed). A ``/v1`` route that declares no scope
    needs ``admin`` for every owner."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        need = declared_need(self)
        if need is None and self.path_format.startswith("/v1/"):
            need = CROSS_OWNER

        async def strict(request: Request) -> Response:
            strict_request = StrictJsonRequest(request.scope, request.receive)
            try:
                if need is not None:
                    await authorize(strict_request, need)
                return await handler(strict_request)
            except DuplicateKey as exc:
                return problem_response("validation", duplicate_detail(exc.key))

        return strict
