"""Celery task messages for a Redis broker, built without Celery (pure; no I/O).

When the broker is a Redis server, enqueue writes the job record and pushes the task message in
one Lua call (``lua/enqueue.lua``). The message is exactly what ``app.send_task`` would put
there through kombu's Redis transport (kombu 5.x, Celery task protocol 2):

* the list: ``<queue>`` for priority step 0, else ``<queue><sep><step>``, the step being the
  largest of :data:`~api_client.contract.routing.BROKER_TRANSPORT_OPTIONS` ``priority_steps``
  not above the priority (kombu's ``Channel._q_for_pri``), behind the transport's
  ``global_keyprefix`` (:attr:`~api_client.contract.keys.KeyLayout.broker`); ``LPUSH``, as
  ``Channel._put`` does;
* the envelope: ``{"body", "content-encoding", "content-type", "headers", "properties"}``; the
  body is the JSON ``[args, kwargs, embed]``, base64-encoded (``body_encoding: base64``);
* the task-sent event Flower shows: a kombu fanout message ``PUBLISH``\\ed to
  ``<global_keyprefix>/<db>.celeryev/task.sent`` (``keyprefix_fanout`` ``/{db}.``, exchange
  ``celeryev``, routing key ``task.sent``, ``fanout_patterns`` on), its body the event JSON.

The binding sets kombu keeps (``_kombu.binding.*``) are not written: workers consume the lists
directly, and declare their queues themselves.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import socket
import time
import uuid
from dataclasses import dataclass
from functools import lru_cache

from api_client.contract.json_templates import quoted
from api_client.contract.routing import Route, queue_list, shown_kwargs

__all__ = ["BrokerPush", "event_channel", "task_push"]

_EMBED = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}
# Celery's name for a process that sends tasks without being a worker (anon_nodename()).
_ORIGIN = f"gen{os.getpid()}@{socket.gethostname()}"
_REPLY_TO = str(uuid.uuid4())
_CLOCK = itertools.count(1)  # the event's Lamport clock: increasing within this process


@dataclass(frozen=True, slots=True)
class BrokerPush:
    """What enqueue.lua pushes for a new job: LPUSH ``message`` to ``queue_key``, then (when
    ``event`` is not empty) PUBLISH ``event`` to ``channel``."""

    queue_key: str
    message: str
    channel: str
    event: str


def event_channel(db: int, prefix: str = "") -> str:
    return f"{prefix}/{db}.celeryev/task.sent"


def _q(value: object) -> str:
    return json.dumps(value)


# The envelopes as templates, bound once per route: only ids, tags, time and body change per
# call. Kept because bench_enqueue shows it: without the per-route binding compact() took
# longer (issue 28).
_EVENT_BODY = (
    '{{"hostname": {origin}, "utcoffset": {utcoffset}, "pid": {pid}, "clock": {clock}, '
    '"uuid": {tid}, "root_id": {tid}, "parent_id": null, "name": {task}, "args": {argsrepr}, '
    '"kwargs": {kwargsrepr}, "retries": 0, "eta": null, "expires": null, "queue": {queue}, '
    '"exchange": "", "routing_key": {queue}, "timestamp": {now}, "type": "task-sent"}}'
)
_EVENT = (
    '{{"body": "{body}", "content-encoding": "utf-8", "content-type": "application/json", '
    '"headers": {{"hostname": {origin}}}, "properties": {{"delivery_mode": 1, '
    '"delivery_info": {{"exchange": "celeryev", "routing_key": "task.sent"}}, "priority": 0, '
    '"body_encoding": "base64", "delivery_tag": "{tag}"}}}}'
)
_MESSAGE = (
    '{{"body": "{body}", "content-encoding": "utf-8", "content-type": "application/json", '
    '"headers": {{"lang": "py", "task": {task}, "id": {tid}, "shadow": null, "eta": null, '
    '"expires": null, "group": null, "group_index": null, "retries": 0, '
    '"timelimit": [null, null], "root_id": {tid}, "parent_id": null, "argsrepr": {argsrepr}, '
    '"kwargsrepr": {kwargsrepr}, "origin": {origin}, "ignore_result": null, '
    '"replaced_task_nesting": 0, "stamped_headers": null, "stamps": {{}}}}, '
    '"properties": {{"correlation_id": {tid}, "reply_to": "{reply_to}", "delivery_mode": 2, '
    '"delivery_info": {{"exchange": "", "routing_key": {queue}}}, "priority": {priority}, '
    '"body_encoding": "base64", "delivery_tag": "{tag}"}}}}'
)
_ORIGIN_JSON = _q(_ORIGIN)
_EMBED_JSON = _q(_EMBED)


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _tag() -> str:
    """kombu's delivery tag: a random UUID as text."""
    return str(uuid.uuid4())


def _bound(envelope: str, per_call: tuple[str, ...], **constants: object) -> str:
    """``envelope`` with the constants in place, still a format string for ``per_call``."""
    marked = envelope.format(**constants, **{name: f"\x00{name}\x00" for name in per_call})
    marked = marked.replace("{", "{{").replace("}", "}}")
    for name in per_call:
        marked = marked.replace(f"\x00{name}\x00", "{" + name + "}")
    return marked


@lru_cache(maxsize=128)
def _envelopes(task: str, queue: str, priority: int, pid: int) -> tuple[str, str, str]:
    """The message, event body and event envelopes of one route, formatted per call only with
    ids, tags, time and bodies."""
    shown = shown_kwargs(Route(task, queue, priority))  # Flower's "kwargs": the reason
    names = {"task": _q(task), "queue": _q(queue), "origin": _ORIGIN_JSON,
             "kwargsrepr": _q(shown)}
    message = _bound(_MESSAGE, ("body", "tid", "argsrepr", "tag"), reply_to=_REPLY_TO,
                     priority=int(priority), **names)
    event_body = _bound(_EVENT_BODY, ("clock", "tid", "argsrepr", "now"),
                        utcoffset=time.timezone / 3600, pid=pid, **names)
    event = _bound(_EVENT, ("body", "tag"), origin=_ORIGIN_JSON)
    return message, event_body, event


def task_push(task: str, job_id: str, queue: str, priority: int, *, task_id: str | None = None,
              db: int = 0, sent_event: bool = True, prefix: str = "") -> BrokerPush:
    """The message ``send_task(task, args=[job_id], queue=queue, priority=priority)`` would push
    through a transport whose ``global_keyprefix`` is ``prefix``."""
    message, event_body, event = _envelopes(task, queue, priority, os.getpid())
    tid, argsrepr = quoted(task_id or job_id), quoted(repr([job_id]))
    body = _b64(f"[[{quoted(job_id)}], {{}}, {_EMBED_JSON}]")
    message = message.format(body=body, tid=tid, argsrepr=argsrepr, tag=_tag())
    if sent_event:
        sent = event_body.format(clock=next(_CLOCK), tid=tid, argsrepr=argsrepr,
                                 now=repr(time.time()))
        event = event.format(body=_b64(sent), tag=_tag())
    else:
        event = ""
    return BrokerPush(queue_list(queue, priority, prefix), message, event_channel(db, prefix),
                      event)
