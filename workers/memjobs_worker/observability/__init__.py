"""The instruments every layer above may use: Prometheus counters and
histograms (:mod:`~.metrics`), the job middleware that counts outcomes
(:mod:`~.observe`, :mod:`~.jobstats`), their shared hook and background ticker
(:mod:`~.message`, :mod:`~.ticker`), the failure record a dead letter
keeps (:mod:`~.failures`), the record of retrying jobs (:mod:`~.retrying`)
and the worker heartbeats (:mod:`~.heartbeat`). The read-side views built on them (status, collectors,
the metrics server) are in :mod:`memjobs_worker.ops`, above the features."""
