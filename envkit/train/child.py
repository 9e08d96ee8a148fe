"""The trainer's process: `python -m envkit.train.child RUN_DIR [--stop-after K] [--resume auto|never|PATH]`.

Started by `envkit run` (envkit/train/launcher.py) with the managed environment's Python and the
profile's variables already set, or by torchrun (one per GPU). It reads RUN_DIR/config.json, which
the parent resolved and validated. Needs torch and the standard library only.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="envkit.train.child")
    parser.add_argument("run_dir")
    parser.add_argument("--stop-after", type=int, default=None)
    parser.add_argument("--resume", default="auto")
    parser.add_argument("--debug", action="store_true")
    args = parser.parse_args(argv)

    import warnings

    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")  # torch without numpy: harmless here
    from envkit.errors import EnvkitError
    from envkit.train.guards import TrainingStopped

    run_dir = Path(args.run_dir)
    try:
        resolved = json.loads((run_dir / "config.json").read_text())
        from envkit.train.config import Config
        from envkit.train.loop import train

        cfg = Config.from_resolved(resolved)
        summary = train(cfg, run_dir, stop_after=args.stop_after, resume=args.resume,
                        torch_settings=resolved.get("torch_settings"))
    except EnvkitError as exc:
        if args.debug:
            raise
        print(exc.one_line(), file=sys.stderr, flush=True)
        return 2
    except TrainingStopped as exc:
        if args.debug:
            raise
        print(f"envkit: training stopped: {exc}", file=sys.stderr, flush=True)
        return 3
    except KeyboardInterrupt:
        print("envkit: training aborted", file=sys.stderr, flush=True)
        return 130
    return 0 if summary.get("status") in ("completed", "stopped", "interrupted") else 1


if __name__ == "__main__":  # the spawn guard: DataLoader workers re-import this module on macOS
    sys.exit(main())
