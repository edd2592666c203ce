"""The OpenAPI document of the HTTP API, as checked in at ``docs/openapi.json``.

``python -m api_client.server.openapi_doc docs/openapi.json`` writes it again after a change of
the routes or bodies; ``tests/server/test_server_openapi.py`` fails while the file differs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from api_client.server.asgi import create_app
from api_client.server.settings import ServerSettings

__all__ = ["render"]


def render() -> str:
    """The document as the server serves it at ``/openapi.json``, stably formatted."""
    document = create_app(ServerSettings(api_tokens=None)).openapi()
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m api_client.server.openapi_doc docs/openapi.json")
    Path(sys.argv[1]).write_text(render(), encoding="utf-8")
