"""A doctor check's verdict: `Check(id, status, message, fix)`, and the four statuses.

`fail` is for what stops training on the best device this machine has; a missing optional
speed-up is `warn`. Every non-pass check carries a concrete fix.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Final, Literal

Status = Literal["pass", "warn", "fail", "skip"]  # a check's, and a self-test probe's
PASS: Final = "pass"
WARN: Final = "warn"
FAIL: Final = "fail"
SKIP: Final = "skip"


@dataclass
class Check:
    id: str
    status: Status
    message: str
    fix: str | None = None
    group: str = "PyTorch"
    source: str | None = None

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}
