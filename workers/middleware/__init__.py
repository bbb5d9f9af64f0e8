"""Dramatiq middleware: cross-cutting concerns stay out of the actors."""

from workers.middleware.observe import ObserveJobs

__all__ = ["ObserveJobs"]
