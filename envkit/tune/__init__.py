"""`envkit tune`: a profile from measurements (search.py measures, decide.py decides, writer.py writes)."""

from envkit.tune.search import TuneResult, tune
from envkit.tune.session import run_tune

__all__ = ["TuneResult", "tune", "run_tune"]
