"""Worker-side Redis I/O (its Lua scripts lie with all the others in api_client/contract/lua):
the conditional commits (:mod:`worker.store._commits`), the job lifecycle
(:mod:`worker.store.job_lifecycle`, leases in :mod:`worker.store.leases`) and progress events
(:mod:`worker.store.event_publisher`).

Snapshots and job records are read through api_client's public stores; only what a worker alone
does lives here.
"""

from worker.store._commits import (
    CommitOutcome,
    CommitStatus,
    CommitStore,
    entry_line_parts,
)

__all__ = ["CommitOutcome", "CommitStatus", "CommitStore", "entry_line_parts"]
