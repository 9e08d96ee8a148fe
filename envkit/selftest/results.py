"""What a self-test finds: one ProbeResult per probe, gathered in a SelftestReport (--json prints
its to_dict())."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from envkit.checks.verdict import Status
    from envkit.config.schema import DeviceType, TrainPrecision


@dataclass
class ProbeResult:
    name: str
    status: Status
    seconds: float = 0.0
    error: float | None = None  # relative error vs the float64 CPU reference, where there is one
    tolerance: float | None = None
    message: str = ""
    fix: str | None = None
    check: str | None = None  # the doctor check id or profile setting the fix points at
    kind: str | None = None  # failure class (wrong, nan, crash, timeout, unsupported, ...)
    details: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        d = asdict(self)
        if d["error"] is not None and not math.isfinite(d["error"]):
            d["error"] = None  # NaN/inf are not JSON: `kind` ("nan") and the message say it
        return d


@dataclass
class SelftestReport:
    device: DeviceType  # as asked (auto), until the worker's facts decide it
    device_name: str
    python: str
    torch: str | None
    profile: str | None
    precision: TrainPrecision | None
    quick: bool
    isolate: bool = False
    probes: list[ProbeResult] = field(default_factory=list)
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    runtime: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return bool(self.probes) and not any(p.status == "fail" for p in self.probes)

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    def counts(self) -> dict[str, int]:
        out = {"pass": 0, "warn": 0, "fail": 0, "skip": 0}
        for p in self.probes:
            out[p.status] = out.get(p.status, 0) + 1
        return out

    def probe(self, name: str) -> ProbeResult | None:
        return next((p for p in self.probes if p.name == name), None)

    def to_dict(self) -> dict:
        return {"ok": self.ok, "device": self.device, "device_name": self.device_name, "python": self.python,
                "torch": self.torch, "profile": self.profile, "precision": self.precision, "quick": self.quick,
                "isolate": self.isolate, "seconds": round(self.seconds, 3), "summary": self.counts(),
                "notes": self.notes, "probes": [p.to_dict() for p in self.probes], "runtime": self.runtime}
