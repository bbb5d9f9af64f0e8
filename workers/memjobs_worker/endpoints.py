"""Where Redis and the state database are: configured URLs, or the embedded stack."""

from __future__ import annotations

from dataclasses import dataclass

from memjobs_client.errors import ConfigurationError
from memjobs_worker.embedded.stack import read_stack
from memjobs_worker.settings import Settings


@dataclass(frozen=True)
class Endpoints:
    redis_url: str
    database_url: str


def resolve_endpoints(settings: Settings) -> Endpoints:
    """The configured URLs; for what is unset, the running embedded stack's.

    Raises:
        ConfigurationError: something is unset and no ``memjobs up`` is running.
    """
    if settings.redis_url and settings.database_url:
        return Endpoints(settings.redis_url, settings.database_url)
    stack = read_stack(settings.data_dir)
    if stack is None:
        names = [name for name, value in (("MEMJOBS_REDIS_URL", settings.redis_url),
                                          ("MEMJOBS_DATABASE_URL", settings.database_url))
                 if not value]
        missing = " and ".join(names) + (" are unset" if len(names) > 1 else " is unset")
        raise ConfigurationError(
            f"no memjobs stack is running in {settings.data_dir} and {missing}: "
            "start the embedded stack with `memjobs up` (in another terminal), "
            "or set the URL(s) of your Redis and PostgreSQL"
        )
    return Endpoints(settings.redis_url or stack.redis_url,
                     settings.database_url or stack.database_url)
