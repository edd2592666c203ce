"""The HTTP tier scales out (docs/http-api.md "Serving processes"): ``compactor serve
--workers N`` is N processes on one port, each with its own event reader, stopped together;
an append over HTTP is one Redis round trip (the script's reply carries the revision); an
overloaded process sheds requests with 429 (COMPACTOR_API_INFLIGHT_MAX), never 503."""

from __future__ import annotations

import json
import select
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis
from server.server_support import TOKEN, running_api, server_settings

from helpers.serve_process import TOKEN as SERVE_TOKEN
from helpers.serve_process import ServeProcess
from helpers.waits import wait_until

REPO = Path(__file__).resolve().parents[2]
DEMO = (REPO / "worker" / "data" / "demo-session.jsonl").read_bytes()
MESSAGES = [{"role": "user", "content": "next step", "timestamp": 1},
            {"role": "assistant", "content": [{"type": "text", "text": "done"}],
             "timestamp": 2}]


def _children(pid: int) -> set[int]:
    found = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        children = (task / "children").read_text().split()
        found.update(int(child) for child in children)
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def _readers(raw: redis.Redis[str]) -> int:
    """Connections blocked in XREAD: one per serving process (its event reader)."""
    return sum(1 for client in raw.client_list() if client.get("cmd") == "xread")


@pytest.fixture
def two_processes(module_redis: str, tmp_path: Path) -> Iterator[ServeProcess]:
    server = ServeProcess(module_redis, tmp_path / "serve.log", COMPACTOR_API_WORKERS="2")
    server.start()
    yield server
    server.stop()


def test_workers_2_is_two_processes_on_one_port_each_with_its_reader(
        two_processes: ServeProcess, module_redis: str) -> None:
    assert two_processes.proc is not None
    parent = two_processes.proc.pid
    children = wait_until(lambda: len(_children(parent)) == 2 and _children(parent),
                          what="two serving processes")
    headers = {"Authorization": f"Bearer {SERVE_TOKEN}"}
    with httpx.Client(base_url=two_processes.url, headers=headers, timeout=30) as http:
        for _ in range(8):  # new connections, spread by the kernel: each process answers alike
            with httpx.Client(base_url=two_processes.url, headers=headers) as fresh:
                name = f"s-{uuid.uuid4().hex[:10]}"
                assert fresh.put(f"/v1/sessions/{name}/jsonl", content=DEMO).status_code == 201
            appended = http.post(f"/v1/sessions/{name}/entries", json={"entries": MESSAGES})
            assert appended.status_code == 200, appended.text
    with redis.Redis.from_url(module_redis, decode_responses=True) as raw:
        wait_until(lambda: _readers(raw) == 2, what="an event reader in each process")
    two_processes.stop()  # SIGTERM to the parent: every child ends with it
    assert not any(_alive(child) for child in children)


def test_an_append_is_one_round_trip_and_returns_its_revision(module_redis: str) -> None:
    with running_api(module_redis) as url, \
            httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}) as http, \
            redis.Redis.from_url(module_redis, decode_responses=True) as raw:
        name = f"s-{uuid.uuid4().hex[:10]}"
        assert http.put(f"/v1/sessions/{name}/jsonl", content=DEMO).status_code == 201
        first = http.post(f"/v1/sessions/{name}/entries", json={"entries": MESSAGES}).json()
        with raw.monitor() as monitor:
            raw.ping()  # MONITOR is on once its first line (this PING) comes back
            while monitor.next_command()["command"] != "PING":
                pass  # the ping's own connection opening
            second = http.post(f"/v1/sessions/{name}/entries", json={"entries": MESSAGES})
            raw.ping()  # the end of the append's commands
            sent = []
            while (command := monitor.next_command())["command"] != "PING":
                if command["client_type"] != "lua":  # what a script runs is not a round trip
                    sent.append(command["command"].split()[0].upper())
        assert sent == ["EVALSHA"], sent
        second = second.json()
        assert second["revision"] == first["revision"] + 1
        assert second["revision"] == int(raw.get(f"compactor:session:{{{name}}}:rev") or 0)


def test_past_the_inflight_cap_a_request_is_429_overloaded_before_it_is_read(
        module_redis: str) -> None:
    """Two appends whose bodies have not come yet hold the two places of the process; a third
    request is 429 at once, a long poll still goes (waiters have their own cap), and once the two
    bodies arrive a request goes again."""
    settings = server_settings(api_inflight_max=2)
    with running_api(module_redis, settings) as url, \
            httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        name = f"s-{uuid.uuid4().hex[:10]}"
        assert http.put(f"/v1/sessions/{name}/jsonl", content=DEMO).status_code == 201
        body = json.dumps({"entries": MESSAGES}).encode()
        head = (f"POST /v1/sessions/{name}/entries HTTP/1.1\r\nHost: x\r\n"
                f"Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode()
        port = int(url.rsplit(":", 1)[1])
        held: list[socket.socket] = []
        answers: list[httpx.Response] = []

        def both_held() -> bool:
            """Two heads without their bodies in flight (one that met a poll of ours in flight
            was refused: it is answered, so another takes its place), and a poll refused."""
            for sock in [s for s in held if select.select([s], [], [], 0)[0]]:
                held.remove(sock)
                sock.close()
            while len(held) < 2:
                held.append(socket.create_connection(("127.0.0.1", port)))
                held[-1].sendall(head)
            answers.append(http.get(f"/v1/sessions/{name}"))
            return answers[-1].status_code == 429

        wait_until(both_held, what="both places taken")
        over = answers[-1]
        assert over.json()["code"] == "overloaded" and over.headers["retry-after"] == "1"
        waiter = http.get(f"/v1/jobs/{name}:{0:016x}", params={"wait": 0.1})
        assert waiter.status_code == 404, waiter.text  # a waiter: not counted here
        for sock in held:
            sock.sendall(body)
            assert sock.recv(65536).startswith(b"HTTP/1.1 200")
            sock.close()
        assert wait_until(lambda: http.get(f"/v1/sessions/{name}").status_code == 200,
                          what="the places back")


def test_the_parent_returns_when_its_children_end_between_two_looks(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Children that both ended after the parent saw one alive, before it listed their
    sentinels: the parent waited on no sentinel at all, for ever (a SIGTERM'd serve hung)."""
    import multiprocessing
    import threading

    from api_client.server import processes

    made: list[Ended] = []

    class Ended:
        """The first child is seen alive once, the second never (its sentinel is readable):
        both end between the parent's first two looks."""

        def __init__(self, *_: object, **__: object) -> None:
            self.read, self.write = socket.socketpair()
            self.write.close()
            self.sentinel, self.pid, self.looks = self.read.fileno(), None, 0
            self.alive_looks = 1 if not made else 0
            made.append(self)

        def start(self) -> None:
            pass

        def is_alive(self) -> bool:
            self.looks += 1
            return self.looks <= self.alive_looks

        def join(self) -> None:
            self.read.close()

    class Context:
        Process = Ended

    class Config:
        def bind_socket(self) -> socket.socket:
            return socket.socket()

    monkeypatch.setattr(multiprocessing, "get_context", lambda _: Context())
    monkeypatch.setattr(processes.signal, "signal", lambda *_: None)
    returned: list[int] = []
    serving = threading.Thread(target=lambda: returned.append(
        processes.serve_processes(Config(), 2)), daemon=True)  # type: ignore[arg-type]
    serving.start()
    serving.join(10)
    assert returned == [1]  # both ended by themselves: the supervisor restarts the whole
