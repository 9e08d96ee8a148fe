"""The embedded reference trainer behind `envkit run train.yaml`.

config (schema, strict validation, overrides, provenance; no torch) -> launcher (parent: gates,
run folder, child process) -> child (loop: models, data, checkpoint, guards, telemetry, mfu).
Modules that import torch do so themselves; importing this package stays cheap.
"""
