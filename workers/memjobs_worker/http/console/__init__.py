"""The web console at ``/console``: queues, workers, sources, recent outcomes,
failure reasons and the dead letters with retry and purge buttons.

Server-rendered Jinja2 templates (``templates/``, package data), no script and
no front-end build; no owner id and no user text on any page (owner-key
prefixes, queue, actor and reason names, counts). Who may use it and the CSRF
token of its forms: :mod:`~.session`; which sessions are still live (what
logout ends): :mod:`~.live`.
"""

from memjobs_worker.http.console.routes import router

__all__ = ["router"]
