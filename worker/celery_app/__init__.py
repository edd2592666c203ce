"""The Celery wiring: the app (``app``: configuration, bootsteps, :func:`create_app`), its class
(``compactor_celery``: settings and one job runtime per process), the tasks that hand a delivered
job to ``worker.service`` (``tasks``) and the worker's Redis transport (``broker_transport``).

``compactor worker`` runs it; ``celery -A worker.celery_app.app worker`` works too.
"""

from worker.celery_app.app import create_app
from worker.celery_app.compactor_celery import CompactorCelery

__all__ = ["CompactorCelery", "create_app"]
