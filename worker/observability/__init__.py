"""What a worker tells its operators: Prometheus metrics (``metrics``; the scrape-time gauges
``queue_depth``, ``session_gauge``, ``tenant_gauge``, ``cooldown_gauge``), the ``/livez`` and
``/readyz`` probes and the heartbeat (``health``), the exporter that serves them (``exporter``),
and log lines without credentials (``log_redaction``). docs/operations.md describes them."""
