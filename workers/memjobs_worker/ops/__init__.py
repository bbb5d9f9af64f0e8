"""Read-side operations views, above the features: queue and ledger status
(:mod:`~.status`), the console's overview (:mod:`~.overview`), the
Prometheus collectors and the metrics server (:mod:`~.collectors`,
:mod:`~.server`), and the append-only rewrite after forgets (:mod:`~.aof`)."""
