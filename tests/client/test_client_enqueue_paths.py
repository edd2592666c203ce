"""One enqueue path per broker kind (docs/storage.md "Enqueue"): on one Redis ``enqueue.lua``
admits, records and indexes the job (and places its message when the broker is that Redis);
any other broker gets the message after it. Its KEYS follow one documented layout and its
arguments are one JSON object of named fields, pinned here per mode; the round trips of one
``compact()`` are counted with MONITOR."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from client.test_client_enqueue_script import Monitor

from api_client import ClientSettings, CompactionClient
from api_client.client.jobs import JobFlows, enqueue_call
from api_client.contract.job_enums import JobKind
from api_client.contract.keys import KeyLayout
from api_client.contract.redis_flows import Pipeline
from api_client.contract.routing import route_for

LAYOUT = KeyLayout()
MANUAL = route_for(JobKind.COMPACT)
COMMON = {"job", "records", "priority", "queue", "reason", "target", "instructions", "ttl",
          "retention", "fields"}


def _call(settings: ClientSettings, broker_db: int | None = None,
          layout: KeyLayout = LAYOUT) -> tuple[list[str], dict[str, Any]]:
    keys, args, _ = enqueue_call(layout, settings, "s1", "compact", "manual", None, None,
                                 broker_db)
    # Named arguments, one JSON object (no positional padding); the task message and its event
    # beside it when the script pushes them.
    assert len(args) == (1 if broker_db is None else 3)
    named = json.loads(args[0])
    if broker_db is not None:
        message, event = args[1:]
        assert json.loads(message)["headers"]["id"] == named["job"]
        assert json.loads(event)["properties"]["delivery_info"]["routing_key"] == "task.sent"
    return keys, named


def _session_keys(keys: list[str], named: dict[str, Any]) -> None:
    s = LAYOUT.session("s1")
    assert keys[:5] == [s.inflight("compact"), LAYOUT.job(named["job"]).record, s.events,
                        s.header, s.entries]


def test_the_layout_with_the_broker_in_this_redis() -> None:
    keys, named = _call(ClientSettings(), broker_db=0)
    _session_keys(keys, named)
    assert keys[5:] == [LAYOUT.tenant_queued("default"), *LAYOUT.fair_index(MANUAL.queue,
                                                                           MANUAL.priority)]
    assert set(named) == COMMON | {"admit", "due", "push"}
    assert set(named["admit"]) == {"policy", "quota", "usage"}
    assert named["admit"]["quota"] == LAYOUT.tenant_quota("default")
    assert named["due"]["key"] == LAYOUT.jobs_due and named["due"]["at"] > 0
    assert set(named["push"]) == {"list", "channel"}
    assert named["push"]["list"] == LAYOUT.broker + "compactor.compact:6"
    assert (named["priority"], named["queue"], named["reason"]) == (6, MANUAL.queue, "manual")
    assert named["fields"][:2] == ["id", named["job"]]


def test_the_layout_with_any_other_broker() -> None:
    keys, named = _call(ClientSettings())
    _session_keys(keys, named)
    assert keys[5:] == [LAYOUT.tenant_queued("default")]  # admitted here; placed elsewhere
    assert set(named) == COMMON | {"admit", "due"}


def test_the_layout_with_the_tenants_inbox() -> None:
    acme = KeyLayout(tenant="acme")
    keys, (arg,), _ = enqueue_call(acme, ClientSettings(tenant="acme", tenant_inbox=True),
                                   "s1", "compact", "manual", None, None)
    assert keys[5:] == [acme.tenant_inbox("acme")]  # the tenant's ACL user may write it
    named = json.loads(arg)
    assert set(named) == COMMON | {"inbox"} and named["inbox"] > 0


@pytest.mark.parametrize("inbox", [False, True])
def test_the_layout_on_a_cluster_names_the_sessions_slot_only(inbox: bool) -> None:
    settings = ClientSettings(redis_cluster=True, broker_url="redis://b:6379/0",
                              tenant_inbox=inbox)
    keys, named = _call(settings)
    assert len(keys) == 5 and all("{s1}" in key for key in keys)
    assert set(named) == COMMON


@pytest.fixture
def broker(own_redis: Any) -> Iterator[redis.Redis[str]]:
    client: redis.Redis[str] = redis.Redis.from_url(own_redis.url, decode_responses=True)
    yield client
    client.close()


def _round_trips(client: CompactionClient, url: str, broker_url: str | None,
                 calls: list[tuple[str, str]]) -> list[tuple[list[str], list[str]]]:
    """The client commands each compact() sent to the sessions' Redis and to the broker."""
    sessions = Monitor(url)
    on_broker = Monitor(broker_url) if broker_url else None
    seen = []
    for sid, reason in calls:
        client.compact(sid, reason)
        seen.append((sessions.until_marker(), on_broker.until_marker() if on_broker else []))
    return seen


def test_a_redis_broker_of_its_own_one_script_then_the_placement(
        settings: ClientSettings, own_redis: Any, broker: redis.Redis[str],
        raw: redis.Redis[str]) -> None:
    with CompactionClient(settings.model_copy(update={"broker_url": own_redis.url})) as client:
        assert client.transport.broker.name == "redis"
        client.warm()  # connects to both and loads place.lua on the broker too
        sids = [client.sessions.create() for _ in range(2)]
        seen = _round_trips(client, settings.redis_url, own_redis.url,
                            [(sids[0], "manual"), (sids[0], "manual"), (sids[1], "threshold")])
    assert seen == [(["EVALSHA"], ["EVALSHA"]),  # enqueue.lua, then place.lua
                    (["EVALSHA"], []),  # coalesced: nothing to take back
                    (["EVALSHA"], ["EVALSHA"])]  # compact_auto.lua, then place.lua
    # Admitted and indexed by the script: the tenant's queue and the due index hold both jobs.
    assert raw.zcard(LAYOUT.tenant_queued("default")) == 2
    assert raw.zcard(LAYOUT.jobs_due) == 2
    assert broker.llen(LAYOUT.broker + "compactor.compact:6") == 1
    assert broker.llen(LAYOUT.broker + "compactor.compact:3") == 1


def test_any_other_broker_one_script_then_the_publish(
        settings: ClientSettings, raw: redis.Redis[str], monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[str] = []
    amqp = settings.model_copy(update={"broker_url": "amqp://guest:guest@127.0.0.1:1//"})
    with CompactionClient(amqp) as client:
        assert client.transport.broker.name == "kombu"
        monkeypatch.setattr(client.transport.producer, "send",
                            lambda job_id, route, resend=False: sent.append(job_id))
        client.warm()
        sids = [client.sessions.create() for _ in range(2)]
        seen = _round_trips(client, settings.redis_url, None,
                            [(sids[0], "manual"), (sids[0], "manual"), (sids[1], "overflow")])
    assert [s for s, _ in seen] == [["EVALSHA"], ["EVALSHA"], ["EVALSHA"]]
    assert len(sent) == 2  # the new jobs, each published once
    assert raw.zcard(LAYOUT.tenant_queued("default")) == 2
    assert raw.zcard(LAYOUT.jobs_due) == 2


def test_the_tenants_inbox_is_written_and_announced_once(
        settings: ClientSettings, raw: redis.Redis[str]) -> None:
    acme = KeyLayout(tenant="acme")
    inbox = acme.tenant_inbox("acme")
    listener = raw.pubsub()
    listener.subscribe(inbox)
    assert listener.get_message(timeout=5)["type"] == "subscribe"
    inboxed = settings.model_copy(update={"tenant": "acme", "tenant_inbox": True})
    with CompactionClient(inboxed) as client:
        client.warm()
        sids = [client.sessions.create() for _ in range(2)]
        seen = _round_trips(client, settings.redis_url, None,
                            [(sids[0], "manual"), (sids[0], "manual"), (sids[1], "threshold"),
                             (sids[0], "overflow")])
        jobs = [client.compact(sid, "manual").id for sid in sids]
    assert [s for s, _ in seen] == [["EVALSHA"]] * 4
    assert sorted(raw.zrange(inbox, 0, -1)) == sorted(jobs)
    announced = []
    while (message := listener.get_message(timeout=1)) is not None:
        announced.append(message["data"])
    # Each new job once, and the upgraded one again (the workers look at its new priority).
    assert announced == [jobs[0], jobs[1], jobs[0]]
    listener.close()
    # Not admitted by the tenant's client: the workers do (docs/tenants.md).
    assert not raw.exists(acme.tenant_queued("acme"), acme.jobs_due)


def _finish(flow: Any, reply: Any) -> Any:
    with pytest.raises(StopIteration) as done:
        flow.send(reply)
    return done.value.value


CLUSTER = ClientSettings(redis_cluster=True, broker_url="redis://b:6379/0")


@pytest.mark.parametrize("outcome", ["created", "coalesced"])
def test_on_a_cluster_the_index_and_the_admission_go_around_the_script(outcome: str) -> None:
    flow = JobFlows(CLUSTER, LAYOUT).enqueue_flow("s1", "compact", "manual", None, None)
    index = next(flow)  # before the record: a client that dies next leaves a job the sweep finds
    assert (index.name, index.args[0]) == ("zadd", LAYOUT.jobs_due)
    (job_id,) = index.args[1]
    admit = flow.send(1)
    assert (admit.name, admit.keys) == ("admit", [LAYOUT.tenant_queued("default")])
    script = flow.send(1_700_000_000_000)  # the fair tag
    assert script.name == "enqueue" and len(script.keys) == 5
    assert json.loads(script.args[0])["job"] == job_id
    reply = [outcome, job_id if outcome == "created" else "s1:0123456789abcdef", "queued", "0-0"]
    if outcome == "created":
        result = _finish(flow, reply)
        assert (result.tag, result.must_send) == (1_700_000_000_000, True)
        return
    back = flow.send(reply)  # not this job: its index entries and reservation go, together
    assert isinstance(back, Pipeline) and not back.transaction
    assert [(c.name, c.args) for c in back.commands] == [
        ("zrem", (LAYOUT.jobs_due, job_id)), ("zrem", (LAYOUT.tenant_queued("default"), job_id)),
        ("hdel", (LAYOUT.tenant_reserved("default"), job_id))]
    assert _finish(flow, [1, 1, 1]).coalesced


def test_on_a_cluster_the_inbox_follows_the_script() -> None:
    acme = KeyLayout(tenant="acme")
    settings = CLUSTER.model_copy(update={"tenant": "acme", "tenant_inbox": True})
    flow = JobFlows(settings, acme).enqueue_flow("s1", "compact", "manual", None, None)
    script = next(flow)  # nothing of the tenant's admission: the workers admit it
    assert script.name == "enqueue" and len(script.keys) == 5
    job_id = json.loads(script.args[0])["job"]
    announce = flow.send(["created", job_id, "queued", "0-0"])
    assert isinstance(announce, Pipeline)
    inbox = acme.tenant_inbox("acme")
    assert [(c.name, c.args[0]) for c in announce.commands] == [("zadd", inbox),
                                                                 ("publish", inbox)]
    assert not _finish(flow, [1, 1]).must_send
