"""``python -m api_client.server [--host H] [--port P] [--insecure-no-auth]``: the HTTP API
for an install with the ``server`` extra and without the ``worker`` one."""

import sys

from api_client.server.serving import main

sys.exit(main())
