"""Record what the device sampler reads on this machine, as a replayable fixture.

    python benchmarks/record_device_sample.py --out tests/device_samples/real_h100.json --load 5

Runs the sampler's own commands (nvidia-smi's query, or ioreg and memory_pressure on a Mac)
through envkit's RecordingRunner and writes a snapshot in the facts runner's format, the way
tests/device_samples/*.json are written. `--load SECONDS` keeps the GPU busy with matmuls in a
thread while recording, so utilization and power are not idle figures. Prints the parsed sample.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from envkit.facts.runner import RecordingRunner, redact_home
from envkit.train.watching.device_sampler import DeviceSampler


def busy(device: str, seconds: float, stop: threading.Event) -> None:
    import torch

    a = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    end = time.time() + seconds
    while time.time() < end and not stop.is_set():
        (a @ a).sum().item()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="snapshot file to write")
    ap.add_argument("--device", choices=("auto", "cuda", "mps", "cpu"), default="auto")
    ap.add_argument("--load", type=float, default=0.0, help="seconds of matmul load on the device while recording")
    ap.add_argument("--samples", type=int, default=3, help="samples taken (the last one is kept in the file)")
    args = ap.parse_args()
    device = args.device
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "mps" if torch.backends.mps.is_available() else "cpu"
    stop = threading.Event()
    loader = None
    if args.load > 0 and device != "cpu":
        loader = threading.Thread(target=busy, args=(device, args.load, stop), daemon=True)
        loader.start()
        time.sleep(min(2.0, args.load / 2))  # let utilization rise before the first sample
    runner = RecordingRunner()
    sampler = DeviceSampler(device, 0 if device == "cuda" else None, runner=runner)
    sample = None
    for _ in range(max(1, args.samples)):
        sample = sampler.sample()
        time.sleep(0.5)
    stop.set()
    snap = {"envkit_snapshot": 1, "system": platform.system(),
            "source": f"recorded by benchmarks/record_device_sample.py on {platform.node() or 'a lent machine'} "
                      f"({device}, load {args.load:g} s) at {time.strftime('%Y-%m-%d %H:%M:%S %Z')}",
            "commands": {k: v for k, v in runner.commands.items() if not k.startswith("ps ")},
            "files": {k: v for k, v in runner.files.items() if k == "/proc/self/status"}}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(redact_home(snap, str(Path.home())), indent=2) + "\n")
    print(json.dumps(sample.to_dict(), indent=2))
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
