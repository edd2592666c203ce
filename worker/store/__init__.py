"""Worker-side Redis I/O: the conditional commits (Lua scripts in this folder).

Snapshots, job records, leases and events use the client's stores (``api_client``); only the
writes a worker alone makes live here.
"""

from worker.store._commits import (
    CommitOutcome,
    CommitStatus,
    CommitStore,
    entry_line_parts,
    line_digest,
)

__all__ = ["CommitOutcome", "CommitStatus", "CommitStore", "entry_line_parts", "line_digest"]
