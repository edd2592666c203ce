"""The ``stored_bytes`` quota: how many bytes of entry lines each tenant's sessions hold
(docs/tenants.md).

``KeyLayout.tenant_bytes(tenant)`` is a hash: session id → bytes of its stored lines (UTF-8,
exactly as stored; its header line included, since issue 39: a header is bounded by
``max_header_bytes`` and counts like an entry), and :data:`BYTES_TOTAL` → their sum
(``lua/_stored_bytes.lua`` keeps the two in step). Every write of a session's lines keeps it:
the client's append (+ the new lines), import and create (= the imported lines) and delete (the
field goes); the compaction entries, which the quota never refuses (an agent must never be left
overflowing): the worker's commits (+ a compaction or branch-summary entry, ± a prune's rewritten
lines) and a draft the client applies (+ its entry, by a command in the round trip after the
script, on a single Redis too).

On a single Redis (``redis_cluster`` false) the session's own script changes the hash in the same
atomic step, and refuses an append or import that would take the tenant's total over its
``stored_bytes_max`` (the quota hash's field, else the setting; 0 = no limit): exact. On a Redis
Cluster the hash lies in another slot: the change is a command of its own after the script
(``lua/stored_bytes.lua``) and the quota is checked by reading the total before the write. There
it is approximate: writers of one tenant at the same instant may together pass the limit by what
they add at once, and a change whose command never ran (the client died between the two) is
missing from the count until the session is imported again, deleted or expires.

A session that expires (retention) is deleted by no script: its count stays until the workers'
reconcile (``worker/store/tenant_bytes.py``) drops the counts of sessions whose header is gone.
"""

from __future__ import annotations

from dataclasses import dataclass

from api_client.contract.errors import QuotaExceededError
from api_client.contract.job_records import quota_exceeded
from api_client.contract.keys import KeyLayout
from api_client.contract.lua_scripts import eval_args
from api_client.contract.redis_flows import Command, Flow, Pipeline, Script, cmd

__all__ = ["BYTES_TOTAL", "QUOTA_FIELD", "StoredBytes", "effective_limit", "utf8_len"]

BYTES_TOTAL = "*"  # the field of the sum (no session id can be it)
QUOTA_FIELD = "stored_bytes_max"  # the quota hash's override of the setting


def utf8_len(text: str) -> int:
    """Bytes of ``text`` as Redis stores it (Lua's ``#`` of the same line)."""
    return len(text) if text.isascii() else len(text.encode("utf-8"))


def effective_limit(override: str | None, default: int) -> int:
    """The tenant's ``stored_bytes_max``: its quota hash's field when set, else the setting."""
    return default if override is None else int(float(override))


@dataclass(frozen=True, slots=True)
class StoredBytes:
    """The stored-bytes bookkeeping of one session's writes (see the module doc)."""

    tenant: str
    field: str  # the session's plain id: its field in the tenant's hash
    key: str  # the tenant's bytes hash
    quota: str  # the tenant's quota overrides
    limit: int  # the settings' stored_bytes_max (0 = none), unless the quota hash says
    in_script: bool  # a single Redis: the session's script counts and checks
    # False: a client on its tenant's own ACL user (``tenant_inbox``), which may not write the
    # count: it neither counts nor checks (docs/tenants.md "A Redis ACL user per tenant").
    counted: bool = True

    @classmethod
    def of(cls, layout: KeyLayout, session_id: str, *, cluster: bool,
           limit: int = 0, counted: bool = True) -> StoredBytes:
        tenant, plain = layout.resolve(session_id)
        return cls(tenant, plain, layout.tenant_bytes(tenant), layout.tenant_quota(tenant),
                   limit, not cluster and counted, counted)

    def script_keys(self) -> tuple[str, ...]:
        """KEYS a session script adds at its end: the tenant's bytes hash, none on a Cluster
        (another slot)."""
        return (self.key,) if self.in_script else ()

    def script_args(self) -> list[str]:
        """ARGV a session script that checks the quota takes: the session's field, the quota
        hash and the default limit. The quota hash is an argument, not a declared key: Redis
        checks a script's declared keys for reading and writing both, and a tenant's ACL user
        may only read its quota (docs/tenants.md); the HGET itself is checked."""
        return [self.field, self.quota if self.in_script else "", str(self.limit)]

    def refusal(self, reply: str) -> QuotaExceededError | None:
        """The error of a script's ``COMPACTOR_QUOTA <quota> <limit> <value>`` reply."""
        code, _, arg = reply.partition(" ")
        return quota_exceeded(self.tenant, arg) if code == "COMPACTOR_QUOTA" else None

    def check(self, growth: int, *, replaces: bool = False, early: bool = False) -> Flow[None]:
        """On a Cluster (or ``early``: a large import, before it writes its steps), refuse a
        write that grows the tenant's lines by ``growth`` bytes over the limit (``replaces``:
        ``growth`` is the session's new count, its old one goes). Reads, never writes."""
        if (self.in_script and not early) or not self.counted:
            return
        reads = (cmd("hget", self.quota, QUOTA_FIELD), cmd("hget", self.key, BYTES_TOTAL),
                 cmd("hget", self.key, self.field))
        override, total, own = yield Pipeline(reads, transaction=False)
        limit = effective_limit(override, self.limit)
        grows = growth - int(own or 0) if replaces else growth
        value = int(total or 0) + grows
        if limit > 0 and grows > 0 and value > limit:
            raise QuotaExceededError(self.tenant, quota="stored_bytes", limit=limit, value=value)

    def change(self, op: str, amount: int | str = "") -> Script:
        """``stored_bytes.lua`` on the tenant's hash: ``add`` / ``set`` / ``drop``."""
        return Script("stored_bytes", [self.key], [op, self.field, str(amount)])

    def after(self, op: str, amount: int) -> Flow[None]:
        """What a Cluster sends after the session's script (nothing on a single Redis)."""
        if self.counted and not self.in_script and (amount or op == "set"):
            yield self.change(op, amount)

    def as_command(self, op: str, amount: int | str = "") -> Command:
        """:meth:`change` as a command of a pipeline or MULTI (``EVAL`` from the loader's
        ``eval_args``: no NOSCRIPT can come back inside one; routed by its key on a Cluster).
        Not counted: a PING."""
        if not self.counted:
            return cmd("ping")
        return cmd("execute_command",
                   *eval_args("stored_bytes", [self.key], [op, self.field, str(amount)]))
