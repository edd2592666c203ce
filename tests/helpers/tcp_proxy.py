"""A loopback TCP proxy in front of a real server that can hold back the server's replies: a
reply lost on the way (a slow link, a dropped connection) after the server did the work."""

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
                if replies:
                    time.sleep(self._take_delay())
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                sock.close()

    def _take_delay(self) -> float:
        with self._lock:
            if self._delays <= 0:
                return 0.0
            self._delays -= 1
            return self._delay_s
