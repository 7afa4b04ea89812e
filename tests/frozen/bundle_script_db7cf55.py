# FROZEN copy of nas/latency/bundle_script.py at commit db7cf55, for tests only: tests show the stand-ins and real logs
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
    python3 measure_bundle.py --rehearse                 # any machine: the round trip with what it has

Runtimes: onnxruntime (any execution provider it has: fp32, int8 from the QDQ graphs, fp16 through
the TensorRT provider), TensorRT through its Python API (hwnas_trt.py beside this script, used when
`import tensorrt` works) or trtexec: fp32, fp16, int8 (explicit quantization from the QDQ graphs);
ExecuTorch (.pte programs, XNNPACK; `pip install executorch`, whose Python runtime imports torch
itself and takes only torch tensors: this script imports no torch of its own and wraps its numpy
input with the module that runtime loaded); OpenVINO (IR .xml + .bin, CPU plugin; `pip install openvino`).

A rehearsal (--rehearse) measures the graphs as they are with onnxruntime (its CUDA provider where
it has one, else the CPU): fp16 bundles' fp32 graphs in fp32, int8 QDQ graphs in int8.  It goes to
rehearsal.json, labelled with this machine and runtime, never as the bundle's target.

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
import random
import shutil
import statistics
import sys
import tempfile
import time
from importlib.metadata import version

try:
    import numpy as np
except ImportError:  # the one package besides a runtime that this script needs
    sys.exit("error: numpy is not installed: pip install numpy (and the runtime this bundle measures)")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the bundle's helpers, beside this script
from hwnas_device import identity, machine_kind, measured_kind  # noqa: E402

RESULTS_SCHEMA = "hwnas.bundle_results"
BUNDLE_VERSION = 2


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


# ----------------------------------------------------------------------------------------------
# timing


def stats(ms):
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
        import onnxruntime as ort  # optional runtime: the device has the one its bundle measures
    except ImportError as e:
        fail(f"{e.name} is not installed: pip install numpy onnxruntime (onnxruntime-gpu for the CUDA and "
             "TensorRT providers; on a Jetson, the onnxruntime-gpu wheel for your JetPack)")
    if provider not in ort.get_available_providers():
        fail(f"onnxruntime here has no {provider} (it has {', '.join(ort.get_available_providers())}): "
             "pip install onnxruntime-gpu for CUDA / TensorRT, or pass --provider with one it has")
    if precision == "fp16" and provider != "TensorrtExecutionProvider":
        fail("an fp16 bundle needs TensorRT: --runtime tensorrt or trtexec, or --provider TensorrtExecutionProvider; "
             "to try the round trip on a machine without it: python3 measure_bundle.py --rehearse")
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


def trtexec_factory(bundle, precision):
    exe = trtexec_path()
    if not exe:
        fail("trtexec not found: put it on PATH (JetPack: /usr/src/tensorrt/bin/trtexec), or pip install "
             "tensorrt and use --runtime tensorrt")
    try:
        return bundle_trt(bundle).trtexec_factory(exe, precision)
    except RuntimeError as e:
        fail(str(e))


def bundle_trt(bundle):
    """hwnas_trt.py, the bundle's TensorRT timer (Python API and trtexec)."""
    sys.path.insert(0, bundle)
    try:
        import hwnas_trt  # optional runtime: the bundle's TensorRT timer, beside this script
    except ImportError:
        fail("hwnas_trt.py is missing from the bundle: write the bundle again")
    return hwnas_trt


def tensorrt_factory(bundle, precision):
    hwnas_trt = bundle_trt(bundle)
    why = hwnas_trt.available()
    if why:
        fail(f"{why}; or measure with --runtime trtexec")

    def factory(path, shape, s):
        return hwnas_trt.measure_factory(path, shape, precision, s)

    return factory, {"name": "tensorrt", "version": hwnas_trt.version(), "provider": "", "via": "python"}


def executorch_factory(threads):
    try:
        from executorch.runtime import Runtime  # optional runtime: the device has the one its bundle measures
    except ImportError as e:
        fail(f"{e.name} is not installed: pip install numpy executorch")
    from executorch.extension.pybindings import portable_lib  # optional runtime, as above

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
        import openvino as ov  # optional runtime: the device has the one its bundle measures
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
        return trtexec_factory(args.bundle, precision)
    if runtime == "tensorrt":  # the Python API where it imports, else trtexec
        try:
            import tensorrt  # noqa: F401  # optional runtime: its Python API where it imports
        except ImportError:
            if trtexec_path():
                return trtexec_factory(args.bundle, precision)
            fail("TensorRT is not installed: pip install tensorrt (or JetPack's python3-libnvinfer), or put "
                 "trtexec on PATH")
        return tensorrt_factory(args.bundle, precision)
    fail(f"unknown runtime {runtime!r}: onnxruntime, tensorrt, trtexec, executorch or openvino")


def rehearsal_runtime(args, man):
    """The runtime a rehearsal measures with, and the precision its graphs run at here: the bundle's own
    runtime for .pte / IR bundles; onnxruntime (CUDA provider where present, else CPU) for ONNX ones,
    whose fp16 bundles hold fp32 graphs (fp16 is TensorRT's build flag) and int8 ones QDQ graphs."""
    if man["runtime"] in ("executorch", "openvino"):
        return pick_runtime(args, man), man["precision"]
    try:
        import onnxruntime as ort  # optional runtime: a rehearsal of an ONNX bundle measures with it
    except ImportError:
        fail("a rehearsal of an ONNX bundle measures with onnxruntime: pip install numpy onnxruntime")
    provider = args.provider or ("CUDAExecutionProvider" if "CUDAExecutionProvider" in ort.get_available_providers()
                                 else "CPUExecutionProvider")
    precision = "fp32" if man["precision"] == "fp16" else man["precision"]
    return ort_factory(provider, args.threads or man["threads"], precision), precision


# ----------------------------------------------------------------------------------------------


def merge(old, st, rounds_done):
    """An entry plus one more round (the round medians kept; their median is the figure)."""
    if old is None:
        return {**st, "rounds_ms": [st["median_ms"]], "remeasured": rounds_done, "measured_at": now()}
    k = len(old["rounds_ms"])
    r = old["rounds_ms"] + [st["median_ms"]]

    def mean(f):  # None: trtexec printed no such percentile (its summary, without --exportTimes)
        return None if old[f] is None or st[f] is None else (old[f] * k + st[f]) / (k + 1)

    return {"median_ms": float(statistics.median(r)), "p10_ms": mean("p10_ms"), "p90_ms": mean("p90_ms"),
            "n": old["n"] + st["n"], "rounds_ms": r, "remeasured": old.get("remeasured", 0) + rounds_done,
            "measured_at": now()}


def spread(st):
    """(p90 - p10) / median; 0 where a percentile is unknown (nothing to re-measure for)."""
    if st["p10_ms"] is None or st["p90_ms"] is None or st["median_ms"] <= 0:
        return 0.0
    return (st["p90_ms"] - st["p10_ms"]) / st["median_ms"]


def measure_one(factory, path, shape, s):
    """One round of one graph: re-measured up to `remeasure` times while its spread is too wide."""
    once = factory(path, shape, s)
    best, tries = None, 0
    for tries in range(s["remeasure"] + 1):  # noqa: B007 - used after the loop
        st = once()
        if best is None or spread(st) < spread(best):
            best = st
        if spread(st) <= s["max_spread"]:
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


def parse_args():
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
    ap.add_argument("--rehearse", action="store_true",
                    help="measure with what this machine has (onnxruntime) into rehearsal.json, labelled as such")
    args = ap.parse_args()
    if args.limit is not None and args.limit < 1:
        fail(f"--limit {args.limit}: give a number of graphs >= 1")
    if args.budget_min is not None and not args.budget_min > 0:
        fail(f"--budget-min {args.budget_min:g}: give the minutes to spend measuring, a number > 0")
    if args.rehearse and args.runtime:
        fail("--rehearse picks the runtime this machine has (onnxruntime): leave out --runtime")
    return args


def main():
    args = parse_args()
    try:
        with open(os.path.join(args.bundle, "manifest.json")) as f:
            man = json.load(f)
    except (OSError, ValueError) as e:
        fail(f"no readable manifest.json in {args.bundle} ({e}): run this script from inside a hwnas bundle")
    if man.get("schema") != "hwnas.bundle" or man.get("schema_version") != BUNDLE_VERSION:
        fail(f"{args.bundle}/manifest.json is not a hwnas bundle of format {BUNDLE_VERSION}: use the "
             "measure_bundle.py written with it")
    if args.identify:
        print(json.dumps(identity(machine_kind()), indent=1))
        return
    s = man["settings"]
    if args.rehearse:
        (factory, rt_info), precision = rehearsal_runtime(args, man)
    else:
        (factory, rt_info), precision = pick_runtime(args, man), man["precision"]
    out_path = os.path.join(args.bundle, "rehearsal.json" if args.rehearse else "results.json")
    res = load_results(out_path, man)
    res.update({"device": identity(measured_kind(rt_info)), "runtime": rt_info, "precision": precision,
                "batch": man["batch"], "threads": args.threads or man["threads"], "settings": s})
    if args.rehearse:
        res["rehearsal"] = {"target": man["target"], "runtime": man["runtime"], "precision": man["precision"]}
    todo, _ = plan(man, res, args.only, int(s.get("rounds", 1)),
                   priority=(args.budget_min or man.get("budget_min")) is not None)
    left = len(todo)
    todo = todo[:args.limit] if args.limit is not None else todo
    print(f"{'REHEARSAL: ' if args.rehearse else ''}{len(man['blocks'])} blocks and {len(man['networks'])} "
          f"networks, {s.get('rounds', 1)} round(s): {left} measurements left, {len(todo)} now with "
          f"{rt_info['name']} {rt_info['version']} ({rt_info['provider'] or rt_info['via']}, {precision}) on "
          f"{res['device']['name']}", flush=True)
    budget = args.budget_min if args.budget_min is not None else man.get("budget_min")
    measure_all(factory, todo, res, man, s, args.bundle, out_path, 60 * budget if budget else None)
    if "overhead" in man and res.get("call_overhead_ms") is None:
        res["call_overhead_ms"] = measure_one(factory, os.path.join(args.bundle, man["overhead"]),
                                              [man["batch"], 8, 8, 8], s)[0]["median_ms"]
    left, _ = plan(man, res, "all", int(s.get("rounds", 1)))
    res["complete"], res["updated"] = not left, now()
    atomic_json(out_path, res)
    print(f"done: {out_path} ({len(left)} measurements left"
          f"{'; run again to continue' if left else ''}). Bring it back and import it:\n  {import_cmd(man, args)}")


def import_cmd(man, args):
    """The import command: the bundle's; a rehearsal's imports as what it is, into a table of its own."""
    cmd = man.get("import_command") or f"python -m nas.profile conf={man['target']} import_bundle=<this folder>/results.json"
    if not args.rehearse:
        return cmd
    table = os.path.join(os.path.dirname(cmd.rsplit("import_bundle=", 1)[-1].split()[0]) or ".", "rehearsal_table.json")
    return (cmd.replace("results.json", "rehearsal.json") + f" conf.table={table} allow_mismatch=true")


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
