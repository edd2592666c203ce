"""Facts the documentation states that tests hold the code to, read from the pages themselves
(never copied into a test), so a test fails when the page and the code part.

The Redis ACL lines: ``ACL SETUSER compactor ...`` (a user of the whole key prefix ``compactor``:
workers, Flower, the HTTP API) is in docs/deploying.md, "Redis ACL and TLS";
``ACL SETUSER acme ...`` (a user of the tenant ``acme`` only) in docs/tenants.md, "A Redis ACL
user per tenant". :func:`acl_rules` finds each wherever it is in README.md and docs/*.md, and
insists it is written exactly once.
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["DOC_PAGES", "acl_rules"]

REPO = Path(__file__).resolve().parents[2]
DOC_PAGES = (REPO / "README.md", *sorted((REPO / "docs").glob("*.md")))


def acl_rules(user: str) -> str:
    """The rules of the documented ``ACL SETUSER <user> on >PASSWORD <rules>`` line (what
    follows the password), for the key prefix ``compactor`` and database 0, as written."""
    line = re.compile(rf"^ACL SETUSER {re.escape(user)} on >PASSWORD (.+)$", re.M)
    found = [(page.name, m.group(1).strip()) for page in DOC_PAGES
             for m in line.finditer(page.read_text(encoding="utf-8"))]
    assert len(found) == 1, f"the ACL line of {user!r} is written once in the docs: {found}"
    return found[0][1]
