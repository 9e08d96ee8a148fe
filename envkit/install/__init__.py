"""Installing PyTorch: read an index (index.py), choose the build (variants.py), plan (plan.py,
pure), act (execute.py), undo (rollback.py), and record (lockfile.py)."""
