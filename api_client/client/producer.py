"""The send-only Celery app of the client, for RabbitMQ brokers (kombu publishes); a Redis broker
takes the task message from the client's own scripts and pipelines instead
(:mod:`api_client.contract.task_messages`), so a client on Redis never imports Celery."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from api_client.contract.redis_conn import REDIS_DOWN, unavailable
from api_client.contract.routing import (
    QUEUE_COMPACT,
    QUEUES,
    Route,
    broker_priority,
    is_amqp,
    queue_arguments,
    redis_transport_options,
    shown_kwargs,
)
from api_client.contract.settings import ClientSettings

if TYPE_CHECKING:
    from celery import Celery

__all__ = ["TaskProducer"]


class TaskProducer:
    """A send-only Celery app built on first use (importing celery is costly)."""

    def __init__(self, settings: ClientSettings) -> None:
        self.settings = settings
        self._app: Celery | None = None
        self._lock = threading.Lock()

    def app(self) -> Celery:
        if self._app is None:
            with self._lock:
                if self._app is None:
                    self._app = self._build()
        return self._app

    def _build(self) -> Celery:
        from celery import Celery

        s = self.settings
        url = s.resolved_broker_url
        app = Celery("compactor-client", broker=url, set_as_current=False)
        transport_options = {
            **redis_transport_options(s.key_prefix),  # for a Redis broker (tests)
            "socket_connect_timeout": s.connect_timeout_s,
            "socket_timeout": s.socket_timeout_s,
            "retry_on_timeout": False,
            "max_retries": 0,  # kombu's connect loop: fail on the first refused connection
            "interval_start": 0,
        }
        app.conf.update(
            task_serializer="json", accept_content=["json"], result_serializer="json",
            event_serializer="json", result_backend=None, task_publish_retry=False,
            broker_connection_retry=False, broker_connection_retry_on_startup=False,
            broker_connection_max_retries=0, broker_connection_timeout=s.connect_timeout_s,
            broker_transport_options=transport_options,
            task_send_sent_event=s.send_sent_event,
        )
        if is_amqp(url):
            # The worker's declarations exactly (priority queues, one direct exchange).
            from kombu.entity import Queue

            args = queue_arguments(url)
            app.conf.task_queues = [
                Queue(name, routing_key=name, queue_arguments=args)  # type: ignore[no-untyped-call]
                for name in QUEUES]
            app.conf.task_default_queue = QUEUE_COMPACT
        return app

    def send(self, job_id: str, route: Route, *, resend: bool = False) -> None:
        """Publish the task by name; only the job id travels."""
        from kombu.exceptions import OperationalError

        task_id = f"{job_id}-p{route.priority}" if resend else job_id
        down: tuple[type[BaseException], ...] = (OperationalError, *REDIS_DOWN)
        try:
            self.app().send_task(
                route.task, args=[job_id], queue=route.queue,
                priority=broker_priority(route.priority, self.settings.resolved_broker_url),
                task_id=task_id, retry=False, argsrepr=repr([job_id]),
                kwargsrepr=shown_kwargs(route),
            )
        except down as err:
            raise unavailable(err, "broker") from err

    def close(self) -> None:
        if self._app is not None:
            self._app.close()
            self._app = None
