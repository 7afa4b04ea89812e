"""What the supernet ranking benchmark costs at a given scale (training throughput, wall time).

What ``python -m benchmarks supernet`` costs: training throughput measured on this machine, then
the benchmark's wall time at a dataset size.

Measures, on ``--device`` at ``--resolution`` px with ``--space``:

1. supernet training (``nas.supernet.train.train_supernet``, the sandwich rule and the supernet
   settings' defaults): images per second of its second epoch (the first warms up);
2. stand-alone training (``evaluator=train``, the benchmark's reference and short-training score)
   of the space's smallest and largest network: images per second of the second epoch;
3. scoring one subnet by inherited weights (``evaluator=supernet``): seconds.

Then the benchmark's cost with each of ``--images`` training images (ImageNet's 1,281,167 and
Imagenette's 9,469 by default) at the epochs and counts of ``--supernet-epochs`` / ``--standalone-epochs`` / ``--archs`` /
``--standalone-seeds``, the stand-alone runs at the mean of the smallest's and the largest's rate.
The images are whatever ``--data`` holds; their content does not change the arithmetic, so a
synthetic ImageFolder times the same as a real one of that size (not its decoding, where the
loader, not the GPU, is the bound).

    python -m benchmarks supernet_cost --device cuda --space mbv3 --data imagefolder \\
        --data-root /data/imagenette --resolution 224 --train-samples 6400 --batch-size 128
    taskset -c 1 python -m benchmarks supernet_cost      # tiny on Fashion-MNIST at 16 px, this CPU

Writes ``<out>/supernet_cost_<space>_<resolution>px_<device>.json`` and prints the table.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks._inputs import add_subset_args, load_bench_space, load_subset
from benchmarks.harness import RESULTS, command, machine, write_result
from nas.builder import build
from nas.data import adapt_arch
from nas.latency.runtimes.device import device_identity
from nas.search.evaluate import SupernetEvaluator, TrainEvaluator
from nas.supernet.settings import SupernetSettings
from nas.supernet.train import train_supernet

IMAGES = {"ImageNet": 1_281_167, "Imagenette": 9_469}  # training images of the datasets the cost is projected for


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    add_subset_args(p)
    p.set_defaults(val_samples=512)
    p.add_argument("--space", default="tiny", help="the search space (a shipped name or a YAML file)")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:<i>")
    p.add_argument("--batch-size", type=int, default=64, help="training batch (the supernet's and the stand-alone's)")
    p.add_argument("--images", type=int, nargs="+", default=list(IMAGES.values()),
                   help="training-set sizes the cost is computed for (default: ImageNet's, Imagenette's)")
    p.add_argument("--supernet-epochs", type=int, default=60)
    p.add_argument("--standalone-epochs", type=int, default=30)
    p.add_argument("--archs", type=int, default=24)
    p.add_argument("--standalone-seeds", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=str(RESULTS))
    a = p.parse_args(argv)
    if a.train_samples < 0:
        p.error(f"--train-samples must be 0 (every training image) or more, got {a.train_samples}")
    for k in ("batch_size", "images", "supernet_epochs", "standalone_epochs", "archs",
              "standalone_seeds"):
        v = getattr(a, k)
        if min(v if isinstance(v, list) else [v]) < 1:
            p.error(f"--{k.replace('_', '-')} must be a positive integer, got {v}")
    return a


def supernet_rate(space: Any, data: Any, a: argparse.Namespace, work: Path) -> dict[str, float]:
    """Images per second of the supernet's second training epoch."""
    s = SupernetSettings(epochs=2, seed=a.seed, device=a.device, batch_size=a.batch_size)
    history = train_supernet(space, data, s, work / "supernet")["history"]
    return {"first_epoch_s": history[0]["seconds"], "epoch_s": history[1]["seconds"],
            "images_per_s": len(data.train) / history[1]["seconds"]}


def standalone_rate(arch: Any, data: Any, a: argparse.Namespace) -> dict[str, float]:
    """Images per second of ``evaluator=train``'s second epoch on ``arch`` (timed from the end of the
    first epoch's score, which the evaluator reports between epochs, to the end of training)."""
    marks: list[float] = []
    ev = TrainEvaluator(epochs=2, device=a.device, batch_size=a.batch_size)
    t0 = time.perf_counter()
    r = ev.evaluate(adapt_arch(arch, data), data, seed=a.seed, on_epoch=lambda _e, _acc: marks.append(time.perf_counter()))
    epoch_s = t0 + r.metrics["train_seconds"] - marks[0]
    return {"epoch_s": epoch_s, "images_per_s": len(data.train) / epoch_s, "params_m": arch_params(arch, data)}


def arch_params(arch: Any, data: Any) -> float:
    """Millions of parameters of ``arch`` built for ``data``."""
    return sum(p.numel() for p in build(adapt_arch(arch, data)).parameters()) / 1e6


def score_seconds(space: Any, data: Any, a: argparse.Namespace, work: Path) -> float:
    """Seconds to score one random subnet by inherited weights (the second of two, the checkpoint loaded)."""
    ev = SupernetEvaluator(checkpoint=str(work / "supernet" / "supernet.ckpt"), device=a.device, batch_size=a.batch_size)
    secs = [ev.evaluate(adapt_arch(space.random(k), data), data, seed=a.seed).seconds for k in range(2)]
    return secs[-1]


def projected(a: argparse.Namespace, images: int, sn_ips: float, sa_ips: float, score_s: float) -> dict[str, float]:
    """The benchmark's hours with ``images`` training images: the supernet once, the stand-alone
    reference runs, the scoring (its validation split assumed the size of the timed one's)."""
    supernet_h = a.supernet_epochs * images / sn_ips / 3600
    reference_h = a.archs * a.standalone_seeds * a.standalone_epochs * images / sa_ips / 3600
    scoring_h = a.archs * score_s / 3600
    return {"images": images, "supernet_h": supernet_h, "reference_h": reference_h, "scoring_h": scoring_h,
            "total_h": supernet_h + reference_h + scoring_h}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    a = _args(argv)
    if a.device == "cpu":
        torch.set_num_threads(1)
    space = load_bench_space(a.space)
    data = load_subset(a)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        sn = supernet_rate(space, data, a, work)
        score_s = score_seconds(space, data, a, work)
    sa = {name: standalone_rate(arch, data, a) for name, arch in (("smallest", space.smallest()),
                                                                   ("largest", space.largest()))}
    sa_ips = 2 / sum(1 / r["images_per_s"] for r in sa.values())  # the mean epoch time of the two
    device = device_identity("gpu" if a.device.startswith("cuda") else "cpu")["name"]
    result = {"command": command("supernet_cost", argv),
              "space": a.space, "resolution": a.resolution, "data": data.describe(), "device": a.device,
              "device_name": device, "torch": torch.__version__, "batch_size": a.batch_size,
              "timed_images_per_epoch": len(data.train), "supernet": sn, "standalone": sa,
              "supernet_score_s": score_s, "supernet_epochs": a.supernet_epochs,
              "standalone_epochs": a.standalone_epochs, "archs": a.archs, "standalone_seeds": a.standalone_seeds,
              "projected": [projected(a, n, sn["images_per_s"], sa_ips, score_s) for n in a.images]}
    out = Path(a.out) / f"supernet_cost_{Path(a.space).stem}_{a.resolution}px_{a.device.replace(':', '')}.json"
    write_result(out, {**result, "machine": machine()})
    _print(result, out)
    return result


def _print(r: dict[str, Any], out: Path) -> None:
    print(f"\n{r['space']} at {r['resolution']} px on {r['device_name']} (batch {r['batch_size']}, "
          f"{r['timed_images_per_epoch']} images per timed epoch)")
    print(f"{'training':<22} {'images/s':>9} {'epoch s':>8}")
    print(f"{'supernet (sandwich)':<22} {r['supernet']['images_per_s']:>9.0f} {r['supernet']['epoch_s']:>8.1f}")
    for name, s in r["standalone"].items():
        print(f"{'stand-alone ' + name:<22} {s['images_per_s']:>9.0f} {s['epoch_s']:>8.1f}  ({s['params_m']:.2f} M params)")
    print(f"scoring one subnet by inherited weights: {r['supernet_score_s']:.1f} s\n\nthe ranking benchmark "
          f"(supernet {r['supernet_epochs']} epochs; reference {r['archs']} archs x {r['standalone_seeds']} seeds x "
          f"{r['standalone_epochs']} epochs), hours:")
    print(f"{'training images':>15} {'supernet':>9} {'reference':>10} {'scoring':>8} {'total':>8}")
    for p in r["projected"]:
        print(f"{p['images']:>15} {p['supernet_h']:>9.1f} {p['reference_h']:>10.1f} {p['scoring_h']:>8.2f} "
              f"{p['total_h']:>8.1f}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
