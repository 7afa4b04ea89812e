#!/usr/bin/env python3
"""Measure a hwnas device bundle: standalone, needs only numpy plus one runtime (no hwnas; no torch but
what ExecuTorch's own Python runtime loads).

Copy the bundle folder to the device and run, from inside it:

    python3 measure_bundle.py                            # the runtime the bundle was written for
    python3 measure_bundle.py --runtime onnxruntime --provider CUDAExecutionProvider
    python3 measure_bundle.py --runtime trtexec          # TensorRT through trtexec (JetPack ships it)
    python3 measure_bundle.py --only blocks --limit 200  # part of it; run again to continue
    python3 measure_bundle.py --identify                 # print what this device reports, measure nothing
    python3 measure_bundle.py --print-trtexec --limit 3  # the exact trtexec command lines it would run, run nothing
    python3 measure_bundle.py --rehearse                 # any machine: the round trip with what it has
    python3 measure_bundle.py --runtime benchmark_model --benchmark-model ./benchmark_model  # a phone over adb

Runtimes: onnxruntime (any execution provider it has: fp32, int8 from the QDQ graphs, fp16 through
the TensorRT provider), TensorRT through its Python API (hwnas_trt.py beside this script, used when
`import tensorrt` works and is 8.5 or later) or trtexec: fp32, fp16, int8 (explicit quantization from the QDQ graphs);
ExecuTorch (.pte programs, XNNPACK; `pip install executorch`, whose Python runtime imports torch
itself and takes only torch tensors: this script imports no torch of its own and wraps its numpy
input with the module that runtime loaded); OpenVINO (IR .xml + .bin, CPU plugin; `pip install openvino`);
LiteRT (.tflite, XNNPACK; hwnas_litert.py beside this script): on an ARM board `--runtime litert` (`pip install
ai-edge-litert`), on an Android phone `--runtime benchmark_model`, LiteRT's benchmark_model run over adb (its
results name the phone: getprop, /proc/cpuinfo).

A rehearsal (--rehearse) measures the graphs as they are with onnxruntime (its CUDA provider where
it has one, else the CPU): fp16 bundles' fp32 graphs in fp32, int8 QDQ graphs in int8.  It goes to
rehearsal.json, labelled with this machine and runtime, never as the bundle's target; .pte, IR and .tflite
bundles are rehearsed with their own runtime's Python package here (a LiteRT one with ai-edge-litert).

It writes results.json next to manifest.json as it goes (atomically, every few seconds and on
Ctrl-C), so an interrupted run continues where it stopped; every graph is measured in the rounds
the manifest asks for, each round in its own shuffled order; a graph's figures are the medians over
its rounds of each round's median, p10 and p90, and rounds more than 2x apart are noted (`noise`).
Bring results.json back and import it with the command it prints at the end.

It runs on Python 3.6 and later (JetPack 4.6's 3.6, JetPack 5's 3.8) with numpy.

It keeps its own copy of the timing loop (warm-up, repeats, min time, median/p10/p90: hwnas_stats.py
beside it) instead of hwnas's: it runs on devices without torch or hwnas, so it imports nothing but
numpy, the standard library, its helpers beside it and one runtime.
"""

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time

try:
    from importlib.metadata import version as package_version  # Python 3.8+
except ImportError:  # Python 3.6 / 3.7 (JetPack 4.6): read only for ExecuTorch, which needs 3.10+ anyway
    package_version = None

try:
    import numpy as np
except ImportError:  # the one package besides a runtime that this script needs
    sys.exit("error: numpy is not installed: pip install numpy (and the runtime this bundle measures)")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the bundle's helpers, beside this script
from hwnas_device import identity, machine_kind, measured_kind  # noqa: E402
from hwnas_litert import BenchmarkError, add_phone_arguments, litert_factory  # noqa: E402
from hwnas_stats import merge, noise_note, now, spread, timed  # noqa: E402

RESULTS_SCHEMA = "hwnas.bundle_results"
BUNDLE_VERSION = 2


def fail(msg):
    sys.exit(f"error: {msg}")


def atomic_json(path, data):
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


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

    ver = package_version("executorch") if package_version else "unknown"
    return factory, {"name": "executorch", "version": ver, "provider": "XNNPACK", "via": "python"}


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
    runs = {".pte": ("executorch",), ".xml": ("openvino",), ".tflite": ("litert", "benchmark_model")}.get(
        fmt, ("onnxruntime", "tensorrt", "trtexec"))
    if runtime not in runs:
        fail(f"this bundle holds {fmt} graphs, which {runtime} does not run: use --runtime {' or '.join(runs)}")
    if runtime in ("litert", "benchmark_model"):  # hwnas_litert.py: the interpreter, or a phone over adb
        try:
            return litert_factory(runtime, args, args.threads or man["threads"], timed)
        except ImportError as e:
            fail(f"{e.name} is not installed: pip install numpy ai-edge-litert (a phone: --runtime benchmark_model)")
        except BenchmarkError as e:
            fail(str(e))
    if runtime == "executorch":
        return executorch_factory(args.threads or man["threads"])
    if runtime == "openvino":
        return openvino_factory(args.threads or man["threads"])
    if runtime == "onnxruntime":
        provider = args.provider or man.get("provider") or "CPUExecutionProvider"
        return ort_factory(provider, args.threads or man["threads"], precision)
    if runtime == "trtexec":
        return trtexec_factory(args.bundle, precision)
    if runtime == "tensorrt":  # the Python API where it imports (8.5+), else trtexec
        try:
            import tensorrt  # optional runtime: its Python API where it imports
        except ImportError:
            if trtexec_path():
                return trtexec_factory(args.bundle, precision)
            fail("TensorRT is not installed: pip install tensorrt (or JetPack's python3-libnvinfer), or put "
                 "trtexec on PATH")
        ver = str(getattr(tensorrt, "__version__", "0"))
        if not bundle_trt(args.bundle).python_api_supported(ver):
            if not trtexec_path():
                fail(f"TensorRT {ver}'s Python API lacks execute_async_v3 (8.5+) and trtexec is not found: put it on "
                     "PATH (JetPack: /usr/src/tensorrt/bin/trtexec)")
            print(f"note: TensorRT {ver}'s Python API lacks execute_async_v3 (8.5+): measuring with trtexec",
                  flush=True)
            return trtexec_factory(args.bundle, precision)
        return tensorrt_factory(args.bundle, precision)
    fail(f"unknown runtime {runtime!r}: onnxruntime, tensorrt, trtexec, executorch, openvino, litert or benchmark_model")


def rehearsal_runtime(args, man):
    """The runtime a rehearsal measures with, and the precision its graphs run at here: the bundle's own
    runtime for .pte / IR / .tflite bundles (a .tflite one through ai-edge-litert's Python interpreter); onnxruntime (CUDA provider where present, else CPU) for ONNX ones,
    whose fp16 bundles hold fp32 graphs (fp16 is TensorRT's build flag) and int8 ones QDQ graphs."""
    if man["runtime"] in ("executorch", "openvino", "litert"):
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


def lead_networks(nets):
    """The networks a budget measures before the blocks, in order: those the manifest gives an
    ``order`` (the calibration and pruned networks in hwnas's calibration order, as nas.profile
    measures them), or, in a manifest without it, the calibration networks as listed."""
    if any("order" in n for n in nets):
        return sorted((n for n in nets if "order" in n), key=lambda n: n["order"])
    return [n for n in nets if n["role"] == "calibration"]


def plan(man, res, only, rounds, priority=False):
    """(round, item) pairs still to measure: every round of each graph that lacks it, each round in
    its own seeded shuffled order so drift spreads over blocks and networks alike.  ``priority``
    (a time budget): the first round in the order that buys the most per minute instead: the
    calibration and pruned networks in nas.profile's order (``lead_networks``), then the blocks as
    the manifest lists them (the ones the spaces' networks use most first), then the other networks
    (held-out); the later rounds after all of it."""
    nets = sorted(man["networks"], key=lambda n: ("calibration", "pruned", "held_out").index(n["role"]))
    if priority:
        lead = lead_networks(nets)
        first = {id(n) for n in lead}
        items = [("network", n) for n in lead] + [("block", b) for b in man["blocks"]] \
            + [("network", n) for n in nets if id(n) not in first]
    else:
        items = [("block", b) for b in man["blocks"]] + [("network", n) for n in nets]
    if only != "all":
        items = [it for it in items if it[0] == only[:-1]]
    failed = res.get("failed") or {}
    items = [it for it in items if it[1]["file"] not in failed]  # the runtime could not run them: left out
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
    ap.add_argument("--runtime", choices=["onnxruntime", "tensorrt", "trtexec", "executorch", "openvino", "litert",
                                          "benchmark_model"], default=None,
                    help="default: the bundle's (tensorrt: the Python API if it imports, else trtexec; litert: its "
                         "Python interpreter; benchmark_model: LiteRT's binary on an Android phone over adb)")
    add_phone_arguments(ap)
    ap.add_argument("--provider", default=None, help="onnxruntime execution provider (default: the bundle's)")
    ap.add_argument("--threads", type=int, default=None, help="CPU threads (default: the bundle's)")
    ap.add_argument("--only", choices=["all", "blocks", "networks"], default="all")
    ap.add_argument("--limit", type=int, default=None, help="measure at most this many graphs (rounds) this run")
    ap.add_argument("--budget-min", type=float, default=None,
                    help="stop after this many minutes, calibration and pruned networks (in nas.profile's "
                         "order) and most used blocks first "
                         "(default: the bundle's budget_min, if it was written with one)")
    ap.add_argument("--retry-failed", action="store_true",
                    help="measure again the graphs the runtime could not run before (results.json: 'failed')")
    ap.add_argument("--identify", action="store_true", help="print this device's identity and exit")
    ap.add_argument("--print-trtexec", action="store_true",
                    help="print the exact trtexec command lines this run would execute (per graph: the engine build "
                         "and timing; a re-measure loads the engine), run nothing")
    ap.add_argument("--trt-version", default=None,
                    help="with --print-trtexec where no trtexec is found: the TensorRT version to show them for")
    ap.add_argument("--rehearse", action="store_true",
                    help="measure with what this machine has (onnxruntime) into rehearsal.json, labelled as such")
    args = ap.parse_args()
    if args.limit is not None and args.limit < 1:
        fail(f"--limit {args.limit}: give a number of graphs >= 1")
    if args.budget_min is not None and not args.budget_min > 0:
        fail(f"--budget-min {args.budget_min:g}: give the minutes to spend measuring, a number > 0")
    if args.rehearse and args.runtime:
        fail("--rehearse picks the runtime this machine has (onnxruntime, or the bundle's Python package): leave out "
             "--runtime")
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
    if args.print_trtexec:
        print_trtexec(args, man)
        return
    s = man["settings"]
    if args.rehearse:
        (factory, rt_info), precision = rehearsal_runtime(args, man)
    else:
        (factory, rt_info), precision = pick_runtime(args, man), man["precision"]
    out_path = os.path.join(args.bundle, "rehearsal.json" if args.rehearse else "results.json")
    res = load_results(out_path, man)
    if args.retry_failed:
        res.pop("failed", None)
    device = rt_info.pop("device", None) or identity(measured_kind(rt_info))  # a phone's comes from the phone
    res.update({"device": device, "runtime": rt_info, "precision": precision,
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
    noise = noise_note(res["entries"])
    res.pop("noise", None)
    if noise:
        res["noise"] = noise
        print(noise["note"], flush=True)
    atomic_json(out_path, res)
    for f, x in sorted((res.get("failed") or {}).items()):
        print(f"left out: {x['label']} ({f}): {x['error']}", flush=True)
    if res.get("failed"):
        print(f"{len(res['failed'])} graph(s) the runtime could not run are left out (results.json: 'failed'; "
              "--retry-failed tries them again)", flush=True)
    print(f"done: {out_path} ({len(left)} measurements left"
          f"{'; run again to continue' if left else ''}). Bring it back and import it:\n  {import_cmd(man, args)}")


def print_trtexec(args, man):
    """The trtexec command lines a run (``--runtime trtexec``, or TensorRT before 8.5) would execute for
    what is left to measure (``--only``, ``--limit``), one per graph and round; nothing runs."""
    if os.path.splitext(man.get("overhead") or ".onnx")[1] != ".onnx":
        fail("this bundle holds no ONNX graphs: trtexec does not run it")
    hwnas_trt = bundle_trt(args.bundle)
    exe = trtexec_path()
    ver = args.trt_version or (hwnas_trt.trtexec_help_version(exe) if exe else None)
    s = man["settings"]
    res = load_results(os.path.join(args.bundle, "results.json"), man)
    budget = args.budget_min if args.budget_min is not None else man.get("budget_min")
    todo, _ = plan(man, res, args.only, int(s.get("rounds", 1)), priority=budget is not None)
    todo = todo[:args.limit] if args.limit is not None else todo
    print(f"# {len(todo)} measurement(s) with {exe or 'trtexec (not found here)'}, TensorRT "
          f"{ver or 'version unknown (its flags then assume 8.5-10)'}; <tmp> is a temporary folder per graph and "
          "round. Each line builds the engine and times it; a re-measure of a noisy round runs it again with "
          "--loadEngine=<tmp>/engine.plan in place of --onnx, --saveEngine and the precision flags.")
    for r, item in todo:
        path = os.path.join(args.bundle, item["file"])
        try:
            flags = hwnas_trt.trtexec_flags(man["precision"], ver, qdq=hwnas_trt.qdq_in_file(path))
        except RuntimeError as e:
            fail(str(e))
        cmd = hwnas_trt.trtexec_command(exe or "trtexec", path, "<tmp>/engine.plan", "<tmp>/times.json", s, flags,
                                        build=True, trt_version=ver)
        print(f"# round {r}: {item['label']}\n" + " ".join(cmd))


def import_cmd(man, args):
    """The import command: the bundle's; a rehearsal's imports as what it is, into a table of its own."""
    cmd = man.get("import_command") or f"python -m nas.profile conf={man['target']} import_bundle=<this folder>/results.json"
    if not args.rehearse:
        return cmd
    table = os.path.join(os.path.dirname(cmd.rsplit("import_bundle=", 1)[-1].split()[0]) or ".", "rehearsal_table.json")
    return (cmd.replace("results.json", "rehearsal.json") + f" conf.table={table} allow_mismatch=true")


def measure_all(factory, todo, res, man, s, bundle, out_path, budget_s=None):
    """Measure ``todo`` ((round, item) pairs), saving ``res`` to ``out_path`` every few seconds.  A graph the
    runtime cannot load or run (an engine that does not build, a delegate that does not prepare) is left
    out and recorded under ``failed`` with its one-line error, and the others go on: a re-run skips it
    (``--retry-failed`` tries it again)."""
    t0 = last = time.time()
    try:
        for i, (r, item) in enumerate(todo, 1):
            if item["file"] in res.get("failed", {}):  # its earlier round failed in this run
                continue
            if budget_s is not None and time.time() - t0 >= budget_s:
                atomic_json(out_path, res)
                print(f"budget of {budget_s / 60:g} min spent after {i - 1} measurements; run again (with a "
                      "budget or without) to continue where this stopped", flush=True)
                break
            shape = [man["batch"], *item["in"]]
            try:
                st, tries = measure_one(factory, os.path.join(bundle, item["file"]), shape, s)
            except Exception as e:  # the runtime's own error, whatever its type: recorded, the rest goes on
                err = f"{type(e).__name__}: {' '.join(str(e).split()) or type(e).__name__}"[:300]
                res.setdefault("failed", {})[item["file"]] = {"label": item["label"], "error": err, "round": r}
                res["entries"].pop(item["file"], None)
                atomic_json(out_path, res)
                print(f"[{i}/{len(todo)}] round {r}: {item['label']} ({item['file']}): FAILED, left out: {err}",
                      flush=True)
                continue
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
