"""A loopback TCP proxy in front of a real server that can hold back the server's replies: a
reply lost on the way (a slow link, a dropped connection) after the server did the work; and one
that keeps every byte each way (:class:`RecordingProxy`)."""

from __future__ import annotations

import socket
import threading
import time


class TcpProxy:
    """Forwards 127.0.0.1:<port> to 127.0.0.1:<target_port>; ``delay_replies(s, n)`` holds the
    next ``n`` chunks the server sends back for ``s`` seconds each (requests pass at once)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._lock = threading.Lock()
        self._delay_s = 0.0
        self._delays = 0
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def delay_replies(self, seconds: float, count: int = 1) -> None:
        with self._lock:
            self._delay_s, self._delays = seconds, count

    def close(self) -> None:
        self._closed = True
        self._listener.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.target_port))
            threading.Thread(target=self._pipe, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client, True), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, replies: bool) -> None:
        try:
            while data := source.recv(1 << 16):
                self._passing(data, replies)
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                sock.close()

    def _passing(self, data: bytes, replies: bool) -> None:
        """``data`` is on its way (from the server when ``replies``)."""
        if replies:
            time.sleep(self._take_delay())

    def _take_delay(self) -> float:
        with self._lock:
            if self._delays <= 0:
                return 0.0
            self._delays -= 1
            return self._delay_s


class RecordingProxy(TcpProxy):
    """A :class:`TcpProxy` that keeps every byte each way: what reached the server (``sent()``)
    and what it answered (``answered()``)."""

    def __init__(self, target_port: int) -> None:
        self._sent, self._answered = bytearray(), bytearray()
        super().__init__(target_port)

    def sent(self) -> bytes:
        with self._lock:
            return bytes(self._sent)

    def answered(self) -> bytes:
        with self._lock:
            return bytes(self._answered)

    def _passing(self, data: bytes, replies: bool) -> None:
        with self._lock:
            (self._answered if replies else self._sent).extend(data)
        super()._passing(data, replies)
