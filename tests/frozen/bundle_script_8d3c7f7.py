# FROZEN copy of nas/latency/bundle_script.py at commit 8d3c7f7, for tests only: tests show the stand-ins and real logs
# failing it (tests/old_code.py). Do not edit.
#!/usr/bin/env python3
"""Measure a hwnas device bundle: standalone, needs only numpy plus one runtime (no hwnas; no torch but
what ExecuTorch's own Python runtime loads).

Copy the bundle folder to the device and run, from inside it:

    python3 measure_bundle.py                            # the runtime the bundle was written for
    python3 measure_bundle.py --runtime onnxruntime --provider CUDAExecutionProvider
    python3 measure_bundle.py --runtime trtexec          # TensorRT through trtexec (JetPack ships it)
    python3 measure_bundle.py --only blocks --limit 200  # part of it; run again to continue
    python3 measure_bundle.py --identify                 # print what this device reports, measure nothing

Runtimes: onnxruntime (any execution provider it has: fp32, int8 from the QDQ graphs, fp16 through
the TensorRT provider), TensorRT through its Python API (hwnas_trt.py beside this script, used when
`import tensorrt` works) or trtexec: fp32, fp16, int8 (explicit quantization from the QDQ graphs);
ExecuTorch (.pte programs, XNNPACK; `pip install executorch`, whose Python runtime imports torch
itself and takes only torch tensors: this script imports no torch of its own and wraps its numpy
input with the module that runtime loaded); OpenVINO (IR .xml + .bin, CPU plugin; `pip install openvino`).

It writes results.json next to manifest.json as it goes (atomically, every few seconds and on
Ctrl-C), so an interrupted run continues where it stopped; every graph is measured in the rounds
the manifest asks for, each round in its own shuffled order.  Bring results.json back and import it
with the command it prints at the end.

It keeps its own copy of the timing loop (warm-up, repeats, min time, median/p10/p90) instead of
hwnas's: it runs on devices without torch or hwnas, so it imports nothing but numpy, the standard
library and one runtime.
"""

import argparse
import datetime
import json
import os
import platform
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

RESULTS_SCHEMA = "hwnas.bundle_results"
BUNDLE_VERSION = 2
_FLAGS = {"avx", "avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni", "amx_tile", "amx_int8",
          "amx_bf16", "asimd", "asimddp", "sve", "neon"}


def fail(msg):
    sys.exit(f"error: {msg}")


def now():
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()


def atomic_json(path, data):
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_text(path):
    try:
        with open(path, errors="replace") as f:
            return f.read().replace("\x00", "").strip()
    except OSError:
        return None


def run_out(cmd):
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
        return out.stdout if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


# ----------------------------------------------------------------------------------------------
# device identity: the fields hwnas's nas.profile records, read the same way


def identity(kind):
    info = read_text("/proc/cpuinfo") or ""
    cpu = next((ln.split(":", 1)[1].strip() for ln in info.splitlines()
                if ln.lower().startswith(("model name", "hardware", "cpu model"))), None)
    flags = re.search(r"^(flags|Features)\s*:\s*(.*)$", info, re.M)
    ident = {"kind": kind, "cpu": cpu or platform.processor() or platform.machine(),
             "cpu_flags": sorted(set(flags.group(2).split()) & _FLAGS) if flags else [],
             "cpu_count": os.cpu_count(), "machine": platform.machine(), "os": platform.platform(),
             "gpu": None, "driver": None, "cuda": None, "jetpack": None}
    for key, field in (("cpu family", "cpu_family"), ("model", "cpu_model"), ("stepping", "cpu_stepping")):
        m = re.search(rf"^{key}\s*:\s*(\S+)\s*$", info, re.M)
        if m:
            ident[field] = m.group(1)
    tegra = read_text("/etc/nv_tegra_release")
    if tegra:  # "# R36 (release), REVISION: 3.0, ..." -> L4T 36.3.0
        ident["jetpack"] = tegra.splitlines()[0]
        m = re.search(r"R(\d+) \(release\), REVISION: ([\d.]+)", tegra)
        ident["l4t"] = f"{m.group(1)}.{m.group(2)}" if m else None
    model = read_text("/proc/device-tree/model")
    if model:
        ident["model"] = model
    if kind in ("gpu", "jetson"):
        q = run_out(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"])
        if q and q.strip():
            parts = [s.strip() for s in q.splitlines()[0].split(",")]
            ident["gpu"], ident["driver"] = parts[0], parts[1] if len(parts) > 1 else None
        head = run_out(["nvidia-smi"]) or ""
        m = re.search(r"CUDA Version:\s*([\d.]+)", head)
        ident["cuda"] = m.group(1) if m else None
        if kind == "jetson" and model:
            ident["gpu"] = model
    ident["name"] = ident["gpu"] if kind in ("gpu", "jetson") and ident["gpu"] else ident["cpu"]
    return ident


# ----------------------------------------------------------------------------------------------
# timing


def stats(ms):
    import numpy as np

    a = np.asarray(ms, dtype=float)
    return {"median_ms": float(np.median(a)), "p10_ms": float(np.percentile(a, 10)),
            "p90_ms": float(np.percentile(a, 90)), "n": int(a.size)}


def timed(call, s):
    """The timing loop: warm-up, then at least `repeats` calls and at least `min_time_s` seconds."""
    for _ in range(s["warmup"]):
        call()
    times, t_end = [], time.perf_counter() + s["min_time_s"]
    while len(times) < s["repeats"] or (time.perf_counter() < t_end and len(times) < 2000):
        t0 = time.perf_counter_ns()
        call()
        times.append((time.perf_counter_ns() - t0) / 1e6)
    return stats(times)


def ort_factory(provider, threads, precision):
    try:
        import numpy as np
        import onnxruntime as ort
    except ImportError as e:
        fail(f"{e.name} is not installed: pip install numpy onnxruntime (onnxruntime-gpu for the CUDA and "
             "TensorRT providers; on a Jetson, the onnxruntime-gpu wheel for your JetPack)")
    if provider not in ort.get_available_providers():
        fail(f"onnxruntime here has no {provider} (it has {', '.join(ort.get_available_providers())}): "
             "pip install onnxruntime-gpu for CUDA / TensorRT, or pass --provider with one it has")
    if precision == "fp16" and provider != "TensorrtExecutionProvider":
        fail("an fp16 bundle needs TensorRT: --runtime tensorrt or trtexec, or --provider TensorrtExecutionProvider")
    providers = [provider]
    if provider == "TensorrtExecutionProvider":
        providers = [(provider, {"trt_fp16_enable": precision in ("fp16", "int8"),
                                 "trt_int8_enable": precision == "int8"}), "CUDAExecutionProvider"]

    def factory(path, shape, s):
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.log_severity_level = 3
        sess = ort.InferenceSession(path, so, providers=providers)
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        name = sess.get_inputs()[0].name
        outs = sess.run(None, {name: x})
        # inputs and outputs bound once (as hwnas's profiler does): time the graph, not output allocation
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

        return lambda: timed(call, s)

    info = {"name": "onnxruntime", "version": ort.__version__, "provider": provider, "via": "python"}
    return factory, info


def trtexec_path():
    exe = shutil.which("trtexec") or "/usr/src/tensorrt/bin/trtexec"
    return exe if os.path.exists(exe) else None


def trtexec_factory(precision):
    exe = trtexec_path()
    if not exe:
        fail("trtexec not found: put it on PATH (JetPack: /usr/src/tensorrt/bin/trtexec), or pip install "
             "tensorrt and use --runtime tensorrt")
    flags = {"fp32": [], "fp16": ["--fp16"], "int8": ["--int8", "--fp16"]}[precision]

    def factory(path, shape, s):
        def once():
            cmd = [exe, f"--onnx={path}", f"--warmUp={max(200, s['warmup'] * 10)}", f"--iterations={s['repeats']}",
                   "--avgRuns=1", "--useSpinWait", "--noDataTransfers", *flags]
            out = subprocess.run(cmd, capture_output=True, text=True)
            m = re.search(r"GPU Compute Time: min = ([\d.]+) ms, max = ([\d.]+) ms, mean = ([\d.]+) ms, "
                          r"median = ([\d.]+) ms, percentile\(90%\) = ([\d.]+) ms", out.stdout)
            if out.returncode != 0 or not m:
                raise RuntimeError(f"trtexec failed on {path}: {(out.stdout + out.stderr)[-1500:]}")
            mn, _, _, med, p90 = map(float, m.groups())
            return {"median_ms": med, "p10_ms": mn, "p90_ms": p90, "n": s["repeats"]}

        return once

    m = re.search(r"TensorRT\.trtexec \[TensorRT v(\d+)\]", run_out([exe, "--help"]) or "")
    return factory, {"name": "tensorrt", "version": m.group(1) if m else "unknown", "provider": "", "via": "trtexec"}


def tensorrt_factory(bundle, precision):
    sys.path.insert(0, bundle)
    try:
        import hwnas_trt
    except ImportError:
        fail("hwnas_trt.py is missing from the bundle: write the bundle again")
    why = hwnas_trt.available()
    if why:
        fail(f"{why}; or measure with --runtime trtexec")

    def factory(path, shape, s):
        return hwnas_trt.measure_factory(path, shape, precision, s)

    return factory, {"name": "tensorrt", "version": hwnas_trt.version(), "provider": "", "via": "python"}


def executorch_factory(threads):
    try:
        import numpy as np
        from executorch.runtime import Runtime
    except ImportError as e:
        fail(f"{e.name} is not installed: pip install numpy executorch")
    from importlib.metadata import version

    from executorch.extension.pybindings import portable_lib

    if portable_lib._threadpool_get_thread_count() != threads:  # the CPU thread pool XNNPACK runs on
        portable_lib._unsafe_reset_threadpool(threads)
    torch = sys.modules["torch"]  # loaded by ExecuTorch's runtime, whose methods take only torch tensors
    runtime = Runtime.get()

    def factory(path, shape, s):
        with open(path, "rb") as f:
            program = runtime.load_program(f.read())
        method = program.load_method("forward")
        inputs = (torch.from_numpy(np.random.default_rng(0).standard_normal(shape).astype(np.float32)),)
        method.execute(inputs)

        def call():  # outputs allocated by every call, as in hwnas's executorch runtime
            method.execute(inputs)

        call.keep = program
        return lambda: timed(call, s)

    return factory, {"name": "executorch", "version": version("executorch"), "provider": "XNNPACK", "via": "python"}


def openvino_factory(threads):
    try:
        import numpy as np
        import openvino as ov
    except ImportError as e:
        fail(f"{e.name} is not installed: pip install numpy openvino")
    core = ov.Core()

    def factory(path, shape, s):
        # as hwnas's openvino runtime: float layers in f32 (not bf16 on AMX / AVX-512 BF16 CPUs), latency hint
        config = {"INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY"}
        request = core.compile_model(core.read_model(path), "CPU", config).create_infer_request()
        x = np.ascontiguousarray(np.random.default_rng(0).standard_normal(shape).astype(np.float32))
        request.set_input_tensor(ov.Tensor(x))
        request.infer(share_outputs=True)

        def call():  # input set once, outputs in the request's own buffers, as in hwnas's openvino runtime
            request.infer(share_outputs=True)

        call.keep = x
        return lambda: timed(call, s)

    return factory, {"name": "openvino", "version": ov.get_version(), "provider": "CPU", "via": "python",
                     "config": {"INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY"}}


def pick_runtime(args, man):
    runtime = args.runtime or man["runtime"]
    precision = man["precision"]
    fmt = os.path.splitext(man.get("overhead") or ".onnx")[1]
    runs = {".pte": ("executorch",), ".xml": ("openvino",)}.get(fmt, ("onnxruntime", "tensorrt", "trtexec"))
    if runtime not in runs:
        fail(f"this bundle holds {fmt} graphs, which {runtime} does not run: use --runtime {' or '.join(runs)}")
    if runtime == "executorch":
        return executorch_factory(args.threads or man["threads"])
    if runtime == "openvino":
        return openvino_factory(args.threads or man["threads"])
    if runtime == "onnxruntime":
        provider = args.provider or man.get("provider") or "CPUExecutionProvider"
        return ort_factory(provider, args.threads or man["threads"], precision)
    if runtime == "trtexec":
        return trtexec_factory(precision)
    if runtime == "tensorrt":  # the Python API where it imports, else trtexec
        try:
            import tensorrt  # noqa: F401
        except ImportError:
            if trtexec_path():
                return trtexec_factory(precision)
            fail("TensorRT is not installed: pip install tensorrt (or JetPack's python3-libnvinfer), or put "
                 "trtexec on PATH")
        return tensorrt_factory(args.bundle, precision)
    fail(f"unknown runtime {runtime!r}: onnxruntime, tensorrt, trtexec, executorch or openvino")


# ----------------------------------------------------------------------------------------------


def merge(old, st, rounds_done):
    """An entry plus one more round (the round medians kept; their median is the figure)."""
    if old is None:
        return {**st, "rounds_ms": [st["median_ms"]], "remeasured": rounds_done, "measured_at": now()}
    k = len(old["rounds_ms"])
    r = old["rounds_ms"] + [st["median_ms"]]
    return {"median_ms": float(statistics.median(r)), "p10_ms": (old["p10_ms"] * k + st["p10_ms"]) / (k + 1),
            "p90_ms": (old["p90_ms"] * k + st["p90_ms"]) / (k + 1), "n": old["n"] + st["n"], "rounds_ms": r,
            "remeasured": old.get("remeasured", 0) + rounds_done, "measured_at": now()}


def measure_one(factory, path, shape, s):
    """One round of one graph: re-measured up to `remeasure` times while its spread is too wide."""
    once = factory(path, shape, s)
    best, tries = None, 0
    for tries in range(s["remeasure"] + 1):  # noqa: B007 - used after the loop
        st = once()
        spread = (st["p90_ms"] - st["p10_ms"]) / st["median_ms"] if st["median_ms"] > 0 else 0.0
        if best is None or spread < (best["p90_ms"] - best["p10_ms"]) / max(best["median_ms"], 1e-12):
            best = st
        if spread <= s["max_spread"]:
            break
    return best, tries


def load_results(path, man):
    if not os.path.exists(path):
        return {"schema": RESULTS_SCHEMA, "schema_version": BUNDLE_VERSION, "bundle_id": man["bundle_id"],
                "entries": {}}
    try:
        with open(path) as f:
            res = json.load(f)
    except (OSError, ValueError) as e:
        fail(f"{path} is unreadable ({e}): move it away to measure from the start")
    if res.get("bundle_id") != man["bundle_id"]:
        fail(f"{path} belongs to another bundle ({res.get('bundle_id')!r}, this is {man['bundle_id']!r}): "
             "move it away first")
    return res


def plan(man, res, only, rounds, priority=False):
    """(round, item) pairs still to measure: every round of each graph that lacks it, each round in
    its own seeded shuffled order so drift spreads over blocks and networks alike.  ``priority``
    (a time budget): the first round in the order that buys the most per minute instead: the
    calibration networks, then the blocks as the manifest lists them (the ones the spaces' networks
    use most first), then the pruned and held-out networks; the later rounds after all of it."""
    nets = sorted(man["networks"], key=lambda n: ("calibration", "pruned", "held_out").index(n["role"]))
    if priority:
        items = [("network", n) for n in nets if n["role"] == "calibration"] + [("block", b) for b in man["blocks"]] \
            + [("network", n) for n in nets if n["role"] != "calibration"]
    else:
        items = [("block", b) for b in man["blocks"]] + [("network", n) for n in nets]
    if only != "all":
        items = [it for it in items if it[0] == only[:-1]]
    todo = []
    for r in range(1, rounds + 1):
        order = list(range(len(items)))
        if not (priority and r == 1):
            random.Random(r).shuffle(order)
        todo += [(r, items[i][1]) for i in order
                 if len((res["entries"].get(items[i][1]["file"]) or {}).get("rounds_ms", [])) < r]
    return todo, len(items)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bundle", nargs="?", default=os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--runtime", choices=["onnxruntime", "tensorrt", "trtexec", "executorch", "openvino"],
                    default=None,
                    help="default: the bundle's (tensorrt: the Python API if it imports, else trtexec)")
    ap.add_argument("--provider", default=None, help="onnxruntime execution provider (default: the bundle's)")
    ap.add_argument("--threads", type=int, default=None, help="CPU threads (default: the bundle's)")
    ap.add_argument("--only", choices=["all", "blocks", "networks"], default="all")
    ap.add_argument("--limit", type=int, default=None, help="measure at most this many graphs (rounds) this run")
    ap.add_argument("--budget-min", type=float, default=None,
                    help="stop after this many minutes, calibration networks and most used blocks first "
                         "(default: the bundle's budget_min, if it was written with one)")
    ap.add_argument("--identify", action="store_true", help="print this device's identity and exit")
    args = ap.parse_args()
    try:
        with open(os.path.join(args.bundle, "manifest.json")) as f:
            man = json.load(f)
    except (OSError, ValueError) as e:
        fail(f"no readable manifest.json in {args.bundle} ({e}): run this script from inside a hwnas bundle")
    if man.get("schema") != "hwnas.bundle" or man.get("schema_version") != BUNDLE_VERSION:
        fail(f"{args.bundle}/manifest.json is not a hwnas bundle of format {BUNDLE_VERSION}: use the "
             "measure_bundle.py written with it")
    if args.identify:
        print(json.dumps(identity(man["device_kind"]), indent=1))
        return
    if args.limit is not None and args.limit < 1:
        fail(f"--limit {args.limit}: give a number of graphs >= 1")
    if args.budget_min is not None and not args.budget_min > 0:
        fail(f"--budget-min {args.budget_min:g}: give the minutes to spend measuring, a number > 0")
    s = man["settings"]
    factory, rt_info = pick_runtime(args, man)
    out_path = os.path.join(args.bundle, "results.json")
    res = load_results(out_path, man)
    res.update({"device": identity(man["device_kind"]), "runtime": rt_info, "precision": man["precision"],
                "batch": man["batch"], "threads": args.threads or man["threads"], "settings": s})
    todo, _ = plan(man, res, args.only, int(s.get("rounds", 1)),
                   priority=(args.budget_min or man.get("budget_min")) is not None)
    left = len(todo)
    todo = todo[:args.limit] if args.limit is not None else todo
    print(f"{len(man['blocks'])} blocks and {len(man['networks'])} networks, {s.get('rounds', 1)} round(s): "
          f"{left} measurements left, {len(todo)} now with {rt_info['name']} {rt_info['version']} "
          f"({rt_info['provider'] or rt_info['via']}, {man['precision']})", flush=True)
    budget = args.budget_min if args.budget_min is not None else man.get("budget_min")
    budget_s = 60 * budget if budget else None
    measure_all(factory, todo, res, man, s, args.bundle, out_path, budget_s)
    if "overhead" in man and res.get("call_overhead_ms") is None:
        res["call_overhead_ms"] = measure_one(factory, os.path.join(args.bundle, man["overhead"]),
                                              [man["batch"], 8, 8, 8], s)[0]["median_ms"]
    left, _ = plan(man, res, "all", int(s.get("rounds", 1)))
    res["complete"], res["updated"] = not left, now()
    atomic_json(out_path, res)
    cmd = man.get("import_command") or f"python -m nas.profile conf={man['target']} import_bundle=<this folder>"
    print(f"done: {out_path} ({len(left)} measurements left"
          f"{'; run again to continue' if left else ''}). Bring it back and import it:\n  {cmd}")


def measure_all(factory, todo, res, man, s, bundle, out_path, budget_s=None):
    t0 = last = time.time()
    try:
        for i, (r, item) in enumerate(todo, 1):
            if budget_s is not None and time.time() - t0 >= budget_s:
                atomic_json(out_path, res)
                print(f"budget of {budget_s / 60:g} min spent after {i - 1} measurements; run again (with a "
                      "budget or without) to continue where this stopped", flush=True)
                break
            shape = [man["batch"], *item["in"]]
            st, tries = measure_one(factory, os.path.join(bundle, item["file"]), shape, s)
            res["entries"][item["file"]] = merge(res["entries"].get(item["file"]), st, tries)
            if time.time() - last > 5 or i == len(todo):
                res["updated"] = now()
                atomic_json(out_path, res)
                last = time.time()
            eta = (time.time() - t0) / i * (len(todo) - i)
            print(f"[{i}/{len(todo)}] round {r}: {item['label']}: {st['median_ms']:.4f} ms  (eta {eta:.0f}s)",
                  flush=True)
    except KeyboardInterrupt:
        atomic_json(out_path, res)
        print("\ninterrupted: the measurements so far are saved in results.json; run again to continue")
        sys.exit(130)


if __name__ == "__main__":
    main()
