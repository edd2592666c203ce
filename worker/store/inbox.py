"""The tenants' inboxes as the workers read them (docs/tenants.md "A Redis ACL user per tenant").

A client on its tenant's own Redis ACL user (``tenant_inbox``) may write only the tenant's keys:
it writes a job's record and puts the job's id in ``<p>:tenant:<t>:inbox`` (a zset). Everything
shared (the tenant's queued jobs and quota counters, the jobs-due index, the fair order's index,
the broker's lists and Celery's event channel) is the workers': :class:`InboxStore` pops the
inbox and does, with the fleet's own Redis user, what the enqueue script does on the request
path: the admission (``inbox_admit.lua``: the tenant's sessions' bytes as the workers measure
them, :mod:`worker.store.inbox_bytes`, then ``admit.lua``'s queued jobs and model budget), the
due index, the task message in its fair place (``place.lua``) and its task-sent event. Nothing
the tenant wrote is trusted: the admitter (``worker/service/_admitter.py``) validates each id
and record first.
"""

from __future__ import annotations

import contextlib
import re
import time
from typing import Any

import redis

from api_client.contract.admission import admission, due_ms
from api_client.contract.errors import QuotaExceededError
from api_client.contract.job_records import quota_exceeded
from api_client.contract.keys import TENANT_NAME, KeyLayout, tenant_of_job
from api_client.contract.lua_scripts import register
from api_client.contract.redis_conn import redis_db
from api_client.contract.routing import Route
from api_client.contract.task_messages import task_push
from api_client.contract.wire import JobRecord
from worker.settings import WorkerSettings
from worker.store.inbox_bytes import InboxBytes
from worker.store.leases import guarded

__all__ = ["PRIORITY_SCALE", "InboxStore", "admitted_as"]

PRIORITY_SCALE = 10**13  # the queued zset's score: route priority x this + Unix ms (_admit.lua)
SCAN_COUNT = 1_000


def glob_escaped(text: str) -> str:
    """``text`` matched literally by ``SCAN MATCH`` and ``PSUBSCRIBE``."""
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)


class InboxStore:
    """The inboxes' reads and the fleet-side admission of one worker process."""

    def __init__(self, client: redis.Redis[str], broker: redis.Redis[str] | None,
                 layout: KeyLayout, settings: WorkerSettings) -> None:
        self.redis = client
        self.broker = broker  # the broker's Redis (None: RabbitMQ, the sender publishes)
        self.layout = layout
        self.settings = settings
        self.bytes = InboxBytes(client, layout)
        self._admit = register(client, "inbox_admit")
        self._place = None if broker is None else register(broker, "place")

    def inbox_match(self) -> str:
        """``SCAN MATCH`` / ``PSUBSCRIBE`` pattern of every tenant's inbox."""
        return self.layout.tenant_inbox("*").replace(self.layout.prefix,
                                                     glob_escaped(self.layout.prefix), 1)

    def tenant_of(self, key: str) -> str | None:
        """The tenant an inbox key (or channel) names; None: not an inbox."""
        head, _, tail = self.layout.tenant_inbox("\0").partition("\0")
        name = key.removeprefix(head).removesuffix(tail)
        return name if TENANT_NAME.fullmatch(name) and self.layout.tenant_inbox(name) == key \
            else None

    def discover(self) -> set[str]:
        """Every tenant that has an inbox now (one ``SCAN`` walk)."""
        found: set[str] = set()
        for key in self.redis.scan_iter(match=self.inbox_match(), count=SCAN_COUNT,
                                        _type="zset"):
            tenant = self.tenant_of(str(key))
            if tenant is not None:
                found.add(tenant)
        return found

    def pop(self, tenant: str, limit: int) -> list[str]:
        """Up to ``limit`` job ids of the tenant's inbox, oldest first (each to one worker)."""
        popped = guarded("", lambda: self.redis.zpopmin(self.layout.tenant_inbox(tenant), limit))
        return [str(member) for member, _ in popped]

    def put_back(self, tenant: str, *job_ids: str) -> None:
        """Ids popped but not admitted (Redis failed meanwhile): back in front, if Redis
        takes them now (else the records' pending TTL ends the jobs' wait)."""
        inbox = self.layout.tenant_inbox(tenant)
        with contextlib.suppress(redis.RedisError):
            if job_ids:
                self.redis.zadd(inbox, dict.fromkeys(job_ids, 0))

    def records(self, job_ids: list[str]) -> list[dict[str, str]]:
        """The jobs' records (an empty dict: none), in one round trip."""
        pipe = self.redis.pipeline(transaction=False)
        for job_id in job_ids:
            pipe.hgetall(self.layout.job(job_id).record)
        return [dict(fields) for fields in guarded("", pipe.execute)] if job_ids else []

    def first_notice(self, job_id: str) -> bool:
        """True once per job: the applied draft's hooks are sent once, however often the
        tenant announces it."""
        key = self.layout.tenant_admitted(tenant_of_job(job_id))
        pipe = self.redis.pipeline(transaction=False)
        pipe.hsetnx(key, f"{job_id}:hooks", "1")
        pipe.expire(key, self.settings.client.job_ttl_s)
        return bool(guarded(job_id, pipe.execute)[0])

    def admitted_priority(self, job_id: str) -> int | None:
        """The route priority the fleet admitted the job at (None: not admitted, or gone)."""
        key = self.layout.queued_of_job(job_id)
        score = guarded(job_id, lambda: self.redis.zscore(key, job_id))
        return None if score is None else int(score // PRIORITY_SCALE)

    def admit(self, record: JobRecord, route: Route) -> int:
        """The tenant's quotas for the job as the fleet's settings say (its sessions' bytes as
        measured, :mod:`worker.store.inbox_bytes`, the queued jobs and the model budget, for
        every kind: ``admission``): its fair tag, or QuotaExceededError. Refused for its bytes,
        the tenant's other sessions are measured again first: a deleted one no longer counts."""
        tenant, field = self.layout.resolve(record.session_id)
        size = str(self.bytes.measure(record.session_id)) if self.bytes.wanted(tenant) else ""
        try:
            return self._admitted(record, route, tenant, [field, size])
        except QuotaExceededError as err:
            if err.quota != "stored_bytes" or not self.bytes.recheck(tenant):
                raise
        return self._admitted(record, route, tenant, [field, ""])

    def _admitted(self, record: JobRecord, route: Route, tenant: str, measured: list[str]
                  ) -> int:
        admitted = admission(self.layout, self.settings.client, record.session_id, record.kind,
                             record.reason, route, record.input, record.context_window)
        queued, quota, usage = admitted.keys
        args = [admitted.policy, record.id, *measured, str(self.settings.client.stored_bytes_max)]
        keys = [queued, self.layout.tenant_measured(tenant), quota, usage]
        try:
            tag, limit = guarded(record.id, lambda: self._admit(keys=keys, args=args))
        except redis.ResponseError as err:
            code, _, arg = str(err).partition(" ")
            if code == "COMPACTOR_QUOTA":
                raise quota_exceeded(tenant, arg) from err
            raise
        self.bytes.learned(tenant, int(limit))
        return int(tag)

    def admitted_as(self, job_id: str) -> str | None:
        """``<kind> <reason>`` of the job as the fleet admitted it (None: not from an inbox)."""
        key = self.layout.tenant_admitted(tenant_of_job(job_id))
        return guarded(job_id, lambda: self.redis.hget(key, job_id))

    def upgraded(self, job_id: str, priority: int) -> None:
        """The fleet's queued entry of a job re-sent at a more urgent ``priority``."""
        key = self.layout.queued_of_job(job_id)
        score = priority * PRIORITY_SCALE + int(time.time() * 1000)
        guarded(job_id, lambda: self.redis.zadd(key, {job_id: score}, xx=True))

    def index(self, record: JobRecord, route: Route) -> None:
        """The jobs-due entry (the sweep's), the kind and reason the job was admitted as (the
        worker runs it so: ``JobStore.get``) and the record's route as the fleet computed it
        (the sweep and the fair index read them; whatever the tenant wrote there goes)."""
        job_id, key = record.id, self.layout.job(record.id).record
        admitted = self.layout.tenant_admitted(tenant_of_job(job_id))
        pipe = self.redis.pipeline(transaction=False)
        pipe.zadd(self.layout.jobs_due, {job_id: due_ms(self.settings.client)}, nx=True)
        pipe.hset(admitted, job_id, admitted_as(record))
        pipe.expire(admitted, self.settings.client.job_ttl_s)
        pipe.hset(key, mapping={"priority": str(route.priority), "queue": route.queue})
        guarded(job_id, pipe.execute)

    def place(self, job_id: str, route: Route, tag: int) -> bool:
        """The task message at its fair place in its queue list, with its task-sent event;
        False: the broker is no Redis (the caller sends it)."""
        if self._place is None:
            return False
        shared = self.settings.client
        push = task_push(route.task, job_id, route.queue, route.priority,
                         db=redis_db(shared.resolved_broker_url),
                         sent_event=shared.send_sent_event, prefix=self.layout.broker)
        tags, messages = self.layout.fair_index(route.queue, route.priority)
        args: list[Any] = [str(tag), job_id, push.message, str(shared.job_pending_ttl_s),
                           push.channel, push.event]
        place = self._place
        guarded(job_id, lambda: place(keys=[push.queue_key, tags, messages], args=args))
        return True


def admitted_as(record: JobRecord) -> str:
    """What the admitted hash holds for a job: ``<kind> <reason>`` (reason '' for none)."""
    return f"{record.kind.value} {record.reason.value if record.reason else ''}"
