"""Compactor workers: pure planning (``worker.compaction``), models (``worker.llm``), Celery
wiring."""
