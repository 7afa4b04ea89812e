#!/usr/bin/env python3
"""Measure a hwnas device bundle: standalone, needs only numpy plus onnxruntime or TensorRT.

Copy the bundle folder to the device and run, from inside it:

    python3 measure_bundle.py                       # onnxruntime, settings from manifest.json
    python3 measure_bundle.py --runtime trtexec     # TensorRT via trtexec (JetPack ships it)

It writes results.json next to manifest.json, entry by entry (atomically), so an interrupted run
continues where it stopped.  Bring results.json back and import it:

    python -m nas.profile conf=<target> import_bundle=<bundle dir>/results.json

It keeps its own copy of the timing loop (warm-up, repeats, min time, median/p10/p90) instead of
``nas.latency.measure``: it runs on devices without torch or this package, so it imports nothing
but numpy, the standard library and one runtime.
"""

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time

RESULTS_SCHEMA = "hwnas.bundle_results"


def now():
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()


def atomic_json(path, data):
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=d, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_first(path):
    try:
        with open(path) as f:
            return f.readline().strip()
    except OSError:
        return None


def identity(kind):
    cpu = None
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    ident = {"kind": kind, "cpu": cpu or platform.processor() or platform.machine(), "machine": platform.machine(),
             "os": platform.platform(), "cpu_count": os.cpu_count(), "gpu": None, "driver": None,
             "jetpack": read_first("/etc/nv_tegra_release")}
    if shutil.which("nvidia-smi"):
        q = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                           capture_output=True, text=True)
        if q.returncode == 0 and q.stdout.strip():
            name, drv = [s.strip() for s in q.stdout.splitlines()[0].split(",")[:2]]
            ident["gpu"], ident["driver"] = name, drv
    model = read_first("/proc/device-tree/model")
    if model and kind == "jetson":
        ident["gpu"] = ident["gpu"] or model.strip("\x00")
    ident["name"] = ident["gpu"] if kind in ("gpu", "jetson") and ident["gpu"] else ident["cpu"]
    return ident


def stats(ms):
    import numpy as np

    a = np.asarray(ms, dtype=float)
    return {"median_ms": float(np.median(a)), "p10_ms": float(np.percentile(a, 10)),
            "p90_ms": float(np.percentile(a, 90)), "n": int(a.size)}


def ort_measure(path, shape, threads, provider, s):
    import numpy as np
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.log_severity_level = 3
    sess = ort.InferenceSession(path, so, providers=[provider])
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    name = sess.get_inputs()[0].name
    outs = sess.run(None, {name: x})
    # bind inputs and outputs once (as hwnas's profiler does): time the graph, not output allocation
    binding = sess.io_binding()
    dev = "cpu" if provider == "CPUExecutionProvider" else "cuda"
    keep = [ort.OrtValue.ortvalue_from_numpy(x, dev, 0)]
    binding.bind_ortvalue_input(name, keep[0])
    for o, y in zip(sess.get_outputs(), outs):
        keep.append(ort.OrtValue.ortvalue_from_numpy(y, dev, 0))
        binding.bind_ortvalue_output(o.name, keep[-1])

    def call():
        sess.run_with_iobinding(binding)
        if dev != "cpu":
            binding.synchronize_outputs()

    def once():
        for _ in range(s["warmup"]):
            call()
        times, t_end = [], time.perf_counter() + s["min_time_s"]
        while len(times) < s["repeats"] or (time.perf_counter() < t_end and len(times) < 2000):
            t0 = time.perf_counter_ns()
            call()
            times.append((time.perf_counter_ns() - t0) / 1e6)
        return stats(times)

    return once


def trtexec_measure(path, shape, precision, s):
    exe = shutil.which("trtexec") or "/usr/src/tensorrt/bin/trtexec"
    if not os.path.exists(exe) and not shutil.which(exe):
        sys.exit("trtexec not found: put it on PATH (JetPack: /usr/src/tensorrt/bin/trtexec)")

    def once():
        cmd = [exe, f"--onnx={path}", f"--warmUp={max(200, s['warmup'] * 10)}", f"--iterations={s['repeats']}",
               "--avgRuns=1", "--useSpinWait", "--noDataTransfers"]
        if precision == "fp16":
            cmd.append("--fp16")
        elif precision == "int8":
            cmd.append("--int8")
        out = subprocess.run(cmd, capture_output=True, text=True)
        m = re.search(r"GPU Compute Time: min = ([\d.]+) ms, max = ([\d.]+) ms, mean = ([\d.]+) ms, "
                      r"median = ([\d.]+) ms, percentile\(90%\) = ([\d.]+) ms", out.stdout)
        if out.returncode != 0 or not m:
            raise RuntimeError(f"trtexec failed on {path}:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
        mn, _, _, med, p90 = map(float, m.groups())
        return {"median_ms": med, "p10_ms": mn, "p90_ms": p90, "n": s["repeats"]}

    return once


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bundle", nargs="?", default=os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--runtime", choices=["onnxruntime", "trtexec"], default=None)
    ap.add_argument("--provider", default=None, help="onnxruntime execution provider")
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()

    with open(os.path.join(args.bundle, "manifest.json")) as f:
        man = json.load(f)
    if man.get("schema") != "hwnas.bundle":
        sys.exit("manifest.json is not a hwnas bundle manifest")
    s = man["settings"]
    runtime = args.runtime or man.get("bundle_runtime", "onnxruntime")
    threads = args.threads or man["threads"]
    provider = args.provider or man.get("provider") or "CPUExecutionProvider"
    out_path = os.path.join(args.bundle, "results.json")
    if os.path.exists(out_path):
        with open(out_path) as f:
            res = json.load(f)
    else:
        res = {"schema": RESULTS_SCHEMA, "schema_version": 1, "bundle_id": man["bundle_id"], "entries": {}}
    if res.get("bundle_id") != man["bundle_id"]:
        sys.exit("results.json belongs to another bundle; move it away first")
    if runtime == "onnxruntime":
        import onnxruntime as ort

        rt_info = {"name": "onnxruntime", "version": ort.__version__, "provider": provider}
    else:
        v = subprocess.run([shutil.which("trtexec") or "/usr/src/tensorrt/bin/trtexec", "--help"],
                           capture_output=True, text=True).stdout
        m = re.search(r"TensorRT.v(\d+)", v)
        rt_info = {"name": "tensorrt", "version": m.group(1) if m else "unknown", "provider": "trtexec"}
    res.update({"device": identity(man["device_kind"]), "runtime": rt_info, "precision": man["precision"],
                "batch": man["batch"], "threads": threads, "settings": s, "updated": now()})
    todo = [b for b in man["blocks"] if b["file"] not in res["entries"]]
    print(f"{len(man['blocks'])} blocks, {len(todo)} to measure with {runtime}", flush=True)
    t0 = time.time()
    try:
        for i, b in enumerate(todo, 1):
            path = os.path.join(args.bundle, b["file"])
            shape = [man["batch"], *b["in"]]
            if runtime == "onnxruntime":
                once = ort_measure(path, shape, threads, provider, s)
            else:
                once = trtexec_measure(path, shape, man["precision"], s)
            best, rounds = None, 0
            for rounds in range(s["remeasure"] + 1):  # noqa: B007 - used after the loop
                st = once()
                spread = (st["p90_ms"] - st["p10_ms"]) / st["median_ms"]
                if best is None or spread < (best["p90_ms"] - best["p10_ms"]) / best["median_ms"]:
                    best = st
                if spread <= s["max_spread"]:
                    break
            res["entries"][b["file"]] = {**best, "remeasured": rounds, "measured_at": now()}
            atomic_json(out_path, res)
            eta = (time.time() - t0) / i * (len(todo) - i)
            print(f"[{i}/{len(todo)}] {b['label']}: {best['median_ms']:.4f} ms  (eta {eta:.0f}s)", flush=True)
    except KeyboardInterrupt:
        print("interrupted: measured entries are saved in results.json; run again to continue")
        sys.exit(130)
    if runtime == "onnxruntime" and "overhead" in man:
        res["call_overhead_ms"] = ort_measure(os.path.join(args.bundle, man["overhead"]), [man["batch"], 8, 8, 8],
                                              threads, provider, s)()["median_ms"]
    atomic_json(out_path, res)
    print(f"done: {out_path}")


if __name__ == "__main__":
    main()
