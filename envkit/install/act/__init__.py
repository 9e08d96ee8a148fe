"""Planning and acting on an environment: the plan shown before anything happens (plan.py), the
installer run and torch verified inside the interpreter installed into (execute.py, interp.py),
and the previous package set put back exactly when any of it fails (apply.py, rollback.py)."""
