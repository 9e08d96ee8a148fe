"""Operators that ran on the CPU instead of the Apple GPU. With PYTORCH_ENABLE_MPS_FALLBACK=1,
PyTorch (aten/src/ATen/mps/MPSFallback.mm) warns

    UserWarning: The operator 'aten::nonzero' is not currently supported on the MPS backend and
    will fall back to run on the CPU. This may have performance implications.

and carries on: one such operator in the step can slow the whole run with no other sign. Both
`envkit exec` (reading the command's output) and the reference trainer (through Python's warning
hook) collect them here into summary.json and a hint. PyTorch warns once per operator (often once
per process), so the count says how often it was reported, not how often it ran."""

from __future__ import annotations

import re
import threading
import warnings

_PATTERN = re.compile(r"The operator '([^']+)' is not currently supported on the MPS backend and will fall back to run on the CPU")


class FallbackCounter:
    """Feed it lines (or warning messages); `operators()` is [{operator, count}], most reported first."""

    def __init__(self):
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def feed(self, text: str) -> None:
        for op in _PATTERN.findall(text):
            with self._lock:
                self._counts[op] = self._counts.get(op, 0) + 1

    def operators(self) -> list[dict]:
        with self._lock:
            return [{"operator": op, "count": n} for op, n in sorted(self._counts.items(), key=lambda kv: (-kv[1], kv[0]))]

    def hint(self) -> dict | None:
        """A hint in the shape of envkit/train/watching/diagnose.py's (id, message, evidence, fix)."""
        ops = self.operators()
        if not ops:
            return None
        names = ", ".join(o["operator"] for o in ops[:5]) + (f" and {len(ops) - 5} more" if len(ops) > 5 else "")
        return {"id": "cpu-fallback",
                "message": f"{len(ops)} operator(s) ran on the CPU instead of the GPU: {names}",
                "evidence": "PyTorch's MPS fallback warnings (PYTORCH_ENABLE_MPS_FALLBACK=1)",
                "fix": "replace these operators in the model, or try a newer torch (`envkit setup --torch nightly`) where MPS may cover them"}

    def add_to(self, summary: dict) -> None:
        """summary.json's cpu_fallbacks (always, empty when none) and the hint among its hints."""
        summary["cpu_fallbacks"] = self.operators()
        hint = self.hint()
        if hint:
            summary["hints"] = [h for h in summary.get("hints") or [] if h.get("id") != hint["id"]] + [hint]

    def watch_warnings(self):
        """Count the fallback warnings Python shows from now on (they still show as before).
        Returns a function that puts the previous hook back."""
        previous = warnings.showwarning

        def showwarning(message, category, filename, lineno, file=None, line=None):
            self.feed(str(message))
            return previous(message, category, filename, lineno, file, line)

        warnings.showwarning = showwarning

        def restore():
            if warnings.showwarning is showwarning:
                warnings.showwarning = previous

        return restore
