"""Read-side operations views, above the features: queue and ledger status
(:mod:`~.status`), what is waiting in the queues (:mod:`~.backlog`), the
Prometheus collectors and the metrics server (:mod:`~.collectors`,
:mod:`~.server`), and the append-only rewrite after forgets (:mod:`~.aof`)."""
