"""The OpenAPI document is the truth (issue 39 item 5): Schemathesis, every check, against a real
``compactor serve`` (token, private Redis, real worker) finds nothing. A short seeded pass here;
``make fuzz-api`` runs the long one (docs/http-api.md "The OpenAPI document")."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.ci import missing
from helpers.openapi_fuzz import SCHEMATHESIS, fuzz, serving

pytestmark = pytest.mark.integration

SEED = 39  # deterministic generation: the same cases every run
EXAMPLES = 3  # per operation and phase (make fuzz-api runs thousands)


@pytest.mark.timeout(300)
def test_schemathesis_finds_nothing(tmp_path: Path) -> None:
    if not SCHEMATHESIS.exists():
        missing("schemathesis (the dev extra: make install)")
    with serving(tmp_path) as url:
        run = fuzz(url, tmp_path, max_time=20, seed=SEED, max_examples=EXAMPLES)
    print(run.output[-1500:])
    assert run.exit_code == 0, run.output[-6000:]
    assert "22 selected / 22 total" in run.output, run.output[-3000:]
