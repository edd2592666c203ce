"""``compactor serve``: the HTTP API (the outermost layer, docs/rules.md "Layers"), an ASGI app over
the asyncio client.

It imports the public client (``api_client``) and the contract, never ``worker``; it needs the
``server`` extra (FastAPI, uvicorn). :func:`api_client.server.asgi.create_app` builds the app,
:func:`api_client.server.serving.serve` checks the settings and runs it on uvicorn;
``python -m api_client.server`` does that without the worker extra.
"""
