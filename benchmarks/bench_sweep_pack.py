"""A CIFAR-10 sweep with `envkit sweep --pack auto` against the same sweep run one at a time.

The optimizer comparison of templates/train/cifar10.yaml (3 recipes x seeds 0, 1, 2 = 9 runs of
ResNet-18), on one device, as a user runs it. The target: aggregate images/s packed >= 2x one at a
time, and every run's accuracy and loss curve unchanged by packing.

    python benchmarks/bench_sweep_pack.py                    # CUDA: 9 runs x 1 epoch of 50,000 images, batch 128
    python benchmarks/bench_sweep_pack.py --epochs 2 --set dataloader.num_workers=2
    python benchmarks/bench_sweep_pack.py --packed-first --json
    python benchmarks/bench_sweep_pack.py --pack 3           # the packed sweep with --pack 3 instead of auto
    python benchmarks/bench_sweep_pack.py --quick            # 2 runs (sgd, adamw; seed 0) of a narrow ResNet-18 on 1,280 images: a CPU smoke test

Data: a CIFAR-10 *binary* folder of random images and labels (5 training files of --per-file records
and a test file), written to a temporary folder (bench_resnet_cifar.write_random_cifar10). Config:
templates/train/cifar10.yaml with its sweep.grid, --epochs epochs, an eval at the end of each epoch
over the whole test set, no checkpoints but the last, no progress bar; --set KEY=VALUE goes to both
sweeps. Each sweep is `python -m envkit sweep train.yaml --json` with `--parallel 1`, then with
`--pack auto` (or --pack N), in a folder of its own (runs/<experiment>/<combination>/) and with a torch.compile
cache of its own (both start cold; the packed sweep's probes are part of its time, as a user pays
them). Its whole wall-clock time is measured, from starting the command to its exit.

Prints: each sweep's wall seconds and aggregate images/s (every run's steps x batch, summed, over
the wall seconds), the ratio packed / one at a time, how many runs --pack auto chose and why (its
`pack:` line); per run: its own median images/s (summary.json), best accuracy and final loss in
each sweep, and the largest difference between the two training-loss curves (metrics.jsonl, at the
same steps) and between the two validation-loss curves. --json prints one JSON object, nothing else.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import yaml  # noqa: E402

from bench_resnet_cifar import write_random_cifar10  # noqa: E402

TEMPLATE = ROOT / "templates" / "train" / "cifar10.yaml"
QUICK_GRID = {"recipe": [{"training.optimizer": "sgd", "training.lr": 0.1, "training.weight_decay": 5.0e-4},
                         {"training.optimizer": "adamw", "training.lr": 1.0e-3, "training.weight_decay": 0.05}],
              "experiment.seed": [0]}
MODES = ("sequential", "packed")


def mode_args(mode: str, args) -> list[str]:
    return ["--parallel", "1"] if mode == "sequential" else ["--pack", args.pack]


def write_config(path: Path, data: Path, args) -> dict:
    """templates/train/cifar10.yaml with this benchmark's values (its sweep block kept; --quick: 2 x 1)."""
    cfg = yaml.safe_load(TEMPLATE.read_text())
    steps_per_epoch = 5 * args.per_file // args.batch
    cfg["dataset"]["path"] = str(data)
    cfg["training"].update(epochs=args.epochs, batch_size=args.batch)
    cfg["eval"].update(every_steps=steps_per_epoch, batches=-(-args.test // args.batch))
    cfg["checkpoint"].update(every_steps=0, keep_last=1)  # the run's end still writes one
    cfg["logging"].update(every_steps=args.log_every, progress="none")
    if args.quick:
        cfg["model"]["width"] = 8
        cfg["training"].update(compile=False, warmup_steps=4)
        cfg["sweep"]["grid"] = QUICK_GRID
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return cfg


def run_sweep(mode: str, config: Path, work: Path, args) -> dict:
    """One whole `envkit sweep` in its own folder: wall seconds, its JSON, its `pack:` lines."""
    work.mkdir(parents=True, exist_ok=True)
    cache = work / "compile-cache"
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"), "TRITON_CACHE_DIR": str(cache / "triton"),
           "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    cmd = [sys.executable, "-m", "envkit", "sweep", str(config), "--json", *mode_args(mode, args),
           *[x for s in args.set for x in ("--set", s)]]
    log = work / "sweep.log"
    with open(log, "w") as err:
        err.write("$ " + " ".join(cmd) + "\n")
        err.flush()
        t0 = time.perf_counter()
        res = subprocess.run(cmd, cwd=work, stdout=subprocess.PIPE, stderr=err, text=True, env=env)
        wall = time.perf_counter() - t0
    text = log.read_text()
    with open(log, "a") as fh:
        fh.write(res.stdout)
    try:
        out = json.loads(res.stdout)
    except ValueError:
        out = None
    if res.returncode != 0 or out is None:
        tail = "\n".join(log.read_text().splitlines()[-40:])
        # nothing but JSON on stdout under --json: the failure goes to stderr
        print(f"envkit sweep ({mode}) exited {res.returncode}; the last lines of {log} (--keep DIR keeps it):\n{tail}",
              file=sys.stderr)
        raise SystemExit(1)
    at_a_time = re.search(r"^sweep: \d+ runs \(.*?, (\d+) at a time\)", text, re.M)
    return {"mode": mode, "wall_seconds": wall, "json": out, "log": str(log),
            "at_a_time": int(at_a_time.group(1)) if at_a_time else None,
            "pack_lines": [line for line in text.splitlines() if line.startswith("pack:")]}


def curves(run_dir: Path) -> tuple[dict, dict]:
    """({step: training loss}, {step: validation loss}) from metrics.jsonl (a step written twice,
    after a rollback or a resume: its last row)."""
    train, val = {}, {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if "loss" in row:
            train[row["step"]] = row["loss"]
        if "val_loss" in row:
            val[row["step"]] = row["val_loss"]
    return train, val


def run_figures(r: dict) -> dict:
    """One run of one sweep: what its folder says."""
    run_dir = Path(r["run_dir"])
    summary = json.loads((run_dir / "summary.json").read_text()) if (run_dir / "summary.json").is_file() else {}
    config = json.loads((run_dir / "config.json").read_text()) if (run_dir / "config.json").is_file() else {}
    T = (config.get("values") or {}).get("training") or {}
    # images a step: the trainer's micro-batch x accumulation (an OOM split halves one and doubles the other)
    batch, accum = summary.get("micro_batch") or T.get("batch_size"), summary.get("grad_accum") or T.get("grad_accum") or 1
    train, val = curves(run_dir) if (run_dir / "metrics.jsonl").is_file() else ({}, {})
    steps, per_step = summary.get("steps") or 0, int(batch or 0) * int(accum)
    return {"run": run_dir.name, "group": r["group"], "status": r["status"], "steps": steps, "batch": per_step,
            "images": steps * per_step, "samples_per_second": summary.get("samples_per_second"),
            "final_loss": summary.get("final_loss"), "best_val_loss": summary.get("best_val_loss"),
            "accuracy": r.get("accuracy"), "final_accuracy": r.get("final_accuracy"),
            "elapsed_seconds": summary.get("elapsed_seconds"), "peak_memory_mb": summary.get("peak_memory_mb"),
            "device_name": summary.get("device_name"), "loss_curve": train, "val_curve": val}


def max_diff(a: dict, b: dict) -> tuple[float | None, int]:
    """(largest |a - b| at the steps both hold, how many steps that is)."""
    common = sorted(set(a) & set(b))
    return (max(abs(a[s] - b[s]) for s in common) if common else None), len(common)


def _diff(a, b):
    return None if a is None or b is None else abs(a - b)


def compare(seq: list[dict], pack: list[dict]) -> list[dict]:
    by_name = {r["run"]: r for r in pack}
    rows = []
    for s in seq:
        p = by_name.get(s["run"], {})
        loss_diff, loss_n = max_diff(s["loss_curve"], p.get("loss_curve") or {})
        val_diff, val_n = max_diff(s["val_curve"], p.get("val_curve") or {})
        rows.append({"run": s["run"], "group": s["group"],
                     "status": [s["status"], p.get("status")],
                     "samples_per_second": [s["samples_per_second"], p.get("samples_per_second")],
                     "accuracy": [s["accuracy"], p.get("accuracy")], "accuracy_diff": _diff(s["accuracy"], p.get("accuracy")),
                     "final_loss": [s["final_loss"], p.get("final_loss")],
                     "best_val_loss": [s["best_val_loss"], p.get("best_val_loss")],
                     "loss_curve_max_diff": loss_diff, "loss_curve_points": loss_n,
                     "val_curve_max_diff": val_diff, "val_curve_points": val_n})
    return rows


def _f(x, fmt: str) -> str:
    return "-" if x is None else f"{x:{fmt}}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="2 runs (sgd, adamw; seed 0) of a width-8 ResNet-18, 256 images a "
                                                         "training file, batch 32, no compile: a smoke test for the CPU")
    ap.add_argument("--batch", type=int, help="training.batch_size (default 128; quick 32)")
    ap.add_argument("--per-file", type=int, help="records in each of the 5 training files (default 10,000: the full 50,000; quick 256)")
    ap.add_argument("--test", type=int, help="records in the test file (default 10,000; quick 64)")
    ap.add_argument("--epochs", type=int, default=1, help="training.epochs of every run (default 1)")
    ap.add_argument("--log-every", type=int, help="logging.every_steps: the loss curve's spacing (default 50; quick 5)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override for every run of both sweeps (repeatable)")
    ap.add_argument("--pack", default="auto", metavar="auto|N", help="the packed sweep's --pack (default auto; N: N at a "
                                                                       "time, e.g. to try packing where auto picks 1)")
    ap.add_argument("--packed-first", action="store_true", help="run the packed sweep before the one-at-a-time sweep")
    ap.add_argument("--keep", type=Path, metavar="DIR", help="work in this folder and keep it (data, config, both runs "
                                                                   "folders, sweep logs) instead of a temporary one")
    ap.add_argument("--only", choices=("sequential", "packed"), help="run one of the two sweeps and print its wall time and "
                    "pack lines (two device calls when both do not fit in one; compare the figures by hand)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    args.batch = args.batch or (32 if args.quick else 128)
    args.per_file = args.per_file or (256 if args.quick else 10_000)
    args.test = args.test or (64 if args.quick else 10_000)
    args.log_every = args.log_every or (5 if args.quick else 50)
    if 5 * args.per_file < args.batch:
        ap.error("--per-file x 5 must hold at least one batch")

    with tempfile.TemporaryDirectory(prefix="bench-sweep-pack-") as tmp:
        work = args.keep.resolve() if args.keep else Path(tmp)
        if args.keep and any(work.glob("*/runs")):
            ap.error(f"{work} already holds runs: a sweep would skip them (pick an empty folder)")
        data = write_random_cifar10(work / "cifar-10-batches-bin", args.per_file, args.test)
        config = work / "train.yaml"
        write_config(config, data, args)
        order = ["packed", "sequential"] if args.packed_first else ["sequential", "packed"]
        if args.only:
            order = [args.only]
        sweeps = {}
        for mode in order:
            if not args.json:
                print(f"{mode}: envkit sweep {' '.join(mode_args(mode, args))} ...", flush=True)
            sweeps[mode] = run_sweep(mode, config, work / mode, args)
            if not args.json:
                print(f"  {sweeps[mode]['wall_seconds']:.1f} s", flush=True)
        runs = {m: [run_figures(r) for r in s["json"]["runs"]] for m, s in sweeps.items()}
        if args.only:
            only = sweeps[args.only]
            images = sum(r["images"] for r in runs[args.only])
            print(json.dumps({"mode": args.only, "wall_seconds": only["wall_seconds"], "at_a_time": only["at_a_time"],
                              "images": images, "images_per_second": images / only["wall_seconds"],
                              "pack_lines": only.get("pack_lines"), "runs": runs[args.only]}, indent=1, default=str))
            return 0

    out = {"quick": args.quick, "epochs": args.epochs, "batch": args.batch, "train_images": 5 * args.per_file,
           "test_images": args.test, "steps_per_epoch": 5 * args.per_file // args.batch, "sets": args.set, "pack": args.pack,
           "order": order, "runs_in_grid": len(runs["sequential"]),
           "device_name": next((r["device_name"] for r in runs["sequential"] if r["device_name"]), None)}
    for mode in MODES:
        s, rs = sweeps[mode], runs[mode]
        images = sum(r["images"] for r in rs)
        out[mode] = {"wall_seconds": s["wall_seconds"], "at_a_time": s["at_a_time"], "images": images,
                     "images_per_second": images / s["wall_seconds"],
                     "completed": sum(r["status"] == "completed" for r in rs), "log": s["log"] if args.keep else None}
    out["packed"]["pack_lines"] = sweeps["packed"]["pack_lines"]
    out["ratio"] = out["packed"]["images_per_second"] / out["sequential"]["images_per_second"]
    out["runs"] = compare(runs["sequential"], runs["packed"])
    diffs = [r["loss_curve_max_diff"] for r in out["runs"] if r["loss_curve_max_diff"] is not None]
    accs = [r["accuracy_diff"] for r in out["runs"] if r["accuracy_diff"] is not None]
    vals = [r["val_curve_max_diff"] for r in out["runs"] if r["val_curve_max_diff"] is not None]
    out["max_loss_curve_diff"] = max(diffs) if diffs else None
    out["max_val_curve_diff"] = max(vals) if vals else None
    out["max_accuracy_diff"] = max(accs) if accs else None
    out["target_met"] = out["ratio"] >= 2.0
    if args.json:
        print(json.dumps(out, indent=2))
        return 0

    pack = out["packed"]
    print(f"\ndevice {out['device_name'] or '?'} | ResNet-18{' (width 8)' if args.quick else ''} | {out['runs_in_grid']} runs x "
          f"{args.epochs} epoch(s) of {out['train_images']:,} images, batch {args.batch} ({out['steps_per_epoch']} steps/epoch)"
          + (f" | --set {' '.join(args.set)}" if args.set else ""))
    for line in pack["pack_lines"]:
        print(f"  {line}")
    print(f"  {'sweep':<11} {'at a time':>9} {'wall s':>9} {'images':>11} {'images/s':>10} {'completed':>9}")
    for mode in MODES:
        m = out[mode]
        print(f"  {mode:<11} {_f(m['at_a_time'], 'd'):>9} {m['wall_seconds']:9.1f} {m['images']:11,} {m['images_per_second']:10,.0f} "
              f"{m['completed']:>5}/{out['runs_in_grid']}")
    print("\n  per run: one at a time | packed")
    head = (f"  {'run':<42} {'images/s':>17} {'best accuracy':>15} {'final loss':>17} {'max |dloss|':>11} {'max |dval|':>10}")
    print(head)
    for r in out["runs"]:
        sps, acc, fl = r["samples_per_second"], r["accuracy"], r["final_loss"]
        print(f"  {r['run']:<42} {_f(sps[0], ',.0f'):>8} {_f(sps[1], ',.0f'):>8} {_f(acc[0], '.4f'):>7} {_f(acc[1], '.4f'):>7} "
              f"{_f(fl[0], '.4f'):>8} {_f(fl[1], '.4f'):>8} {_f(r['loss_curve_max_diff'], '.2e'):>11} {_f(r['val_curve_max_diff'], '.2e'):>10}")
        bad = [s for s in r["status"] if s != "completed"]
        if bad:
            print(f"    not completed: {r['status']}")
    points = max((r["loss_curve_points"] for r in out["runs"]), default=0)
    print(f"\n  packed / one at a time = {out['ratio']:.2f}x aggregate images/s ({pack['at_a_time']} at a time; target >= 2x: "
          f"{'met' if out['target_met'] else 'NOT met'}); largest difference packed vs one at a time: loss curve "
          f"{_f(out['max_loss_curve_diff'], '.2e')} ({points} points a run), val loss {_f(out['max_val_curve_diff'], '.2e')}, "
          f"accuracy {_f(out['max_accuracy_diff'], '.4f')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
