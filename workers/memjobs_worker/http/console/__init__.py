"""The web console at ``/console``: queues (pause, resume), what each worker
runs, throughput and failure graphs, the jobs by state with search and pages,
a job's page, failure reasons and the dead letters with retry and purge.

Server-rendered Jinja2 templates (``templates/``, package data), one small
inline script (live refresh, confirmations) and no front-end build; no owner
id and no user text on any page (owner-key prefixes, queue, actor and reason
names, counts). Who may use it and the CSRF token of its forms:
:mod:`~.session`; which sessions are still live (what logout ends):
:mod:`~.live`; what every page shares: :mod:`~.common`.
"""

from fastapi import APIRouter

from memjobs_worker.http.console import jobs, routes

router = APIRouter(include_in_schema=False)
router.include_router(routes.router)
router.include_router(jobs.router)

__all__ = ["router"]
