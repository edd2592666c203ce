"""Compactor workers, one folder per part (the table in docs/development.md): planning
(``compaction``, over ``tokens``), models (``llm``), hooks, calls out (``outbound``), Redis
(``store``), one job end to end (``service``), the Celery wiring (``celery_app``), what operators
see (``observability``) and the ``compactor`` command (``cli``); beside them ``settings`` and
``summary_requests``, the planner's interface to the model layer."""
