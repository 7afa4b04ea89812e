"""The prepared GPU check: do GPU latency tables reproduce themselves (one command on a GPU machine).

Everything a GPU machine with torch (and no package index) runs in one command, with the figures
that say whether GPU latency tables reproduce themselves.

Steps, each a fresh process with its own time limit, in a fresh ``HWNAS_HOME`` per timing:

1. the GPU tests (``pytest -m gpu`` over the files that hold them);
2. per timing (``graph``: CUDA-graph replays timed by CUDA events; ``eager``: the host's clock around a
   synchronised call): ``nas.profile conf=here_gpu search_space=tiny budget_min=B`` with torch's CUDA
   runtime, then ``nas.validate ... n=N`` on held-out networks;
3. onnxruntime's CUDA provider with ``enable_cuda_graph``, the same way, where onnxruntime-gpu is
   installed (skipped, and said, where it is not).

It reports per timing: the table's own reproducibility (``nas.profile``'s re-timing record), the
predictor's, the table sum's and a FLOPs-linear fit's share within ±5% / ±10%, MAPE and Kendall τ on
the held-out networks, and the minutes of measuring.  Goal (docs/benchmarks.md): the table reproduces
itself ≥ 95% within ±10%, the predictor reaches ≥ 95% within ±10% after 2 minutes.

    bash benchmarks/gpu_check.sh                       # on the GPU machine (installs the carried wheels first)
    python -m benchmarks gpu --rehearse          # here, on the CPU: the same steps, small, in a minute or two

``--rehearse`` runs every step on this machine's CPU (``conf=here`` with the torch runtime, eager: a
CPU has no graphs to replay), with tiny budgets, so a typo costs no device minute.  Writes
``--out`` (default ``benchmarks/results/gpu_check.json``) with a Markdown table beside it (``.md``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import onnxruntime as ort
import torch

from benchmarks.harness import RESULTS, ROOT, command, machine, write_result

GPU_TEST_FILES = ("tests/test_cuda_graph.py", "tests/test_gpu_runtimes.py", "tests/test_profiler.py",
                  "tests/test_evaluate.py", "tests/test_data_stream.py", "tests/test_supernet.py")
# the timings compared, as overrides of conf=here_gpu (torch's CUDA runtime either way)
LEGS = {"graph": ["conf.runtime=torch", "conf.provider=cuda", "conf.cuda_graph=true"],
        "eager": ["conf.runtime=torch", "conf.provider=cuda", "conf.cuda_graph=false"],
        "ort_graph": ["conf.runtime=onnxruntime", "conf.provider=CUDAExecutionProvider", "conf.cuda_graph=true"]}
# on the CPU: the same commands on conf=here with torch (no graphs there)
REHEARSAL_LEGS = {"graph": ["conf.runtime=torch", "conf.provider=cpu"],
                  "eager": ["conf.runtime=torch", "conf.provider=cpu"],
                  "ort_graph": ["conf.runtime=onnxruntime", "conf.provider=CPUExecutionProvider"]}


def _run(args: list[str], *, env: dict[str, str], timeout: float, log) -> tuple[int, float]:
    """Run ``args`` from the checkout, its output appended to ``log``; (exit code, seconds)."""
    log.write(f"\n$ {' '.join(args)}\n")
    log.flush()
    t = time.monotonic()
    try:
        r = subprocess.run(args, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=timeout)
        rc = r.returncode
    except subprocess.TimeoutExpired:
        log.write(f"[timed out after {timeout:.0f} s]\n")
        rc = 124
    dt = time.monotonic() - t
    log.write(f"[exit {rc}, {dt:.1f} s]\n")
    log.flush()
    return rc, dt


def _ort_cuda() -> str | None:
    """Why onnxruntime's CUDA provider cannot run here, or None when it can."""
    if hasattr(ort, "preload_dlls"):
        try:
            ort.preload_dlls()
        except Exception:
            pass
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return f"onnxruntime {ort.__version__} has no CUDAExecutionProvider (onnxruntime-gpu is not installed)"
    return None


def run_leg(name: str, overrides: list[str], *, conf: str, budget_min: float, n: int, work: Path, log,
            timeout: float, watch: bool = True) -> dict[str, Any]:
    """One timing: a fresh HWNAS_HOME, a budgeted profile of ``tiny``, a validation on ``n`` networks.
    ``watch=False`` keeps every measurement of a busy core (a rehearsal checks the steps, not the timings:
    with the watch, a core another process shares saves nothing and the validation has no table)."""
    home = work / name
    env = {**os.environ, "HWNAS_HOME": str(home), "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    table, report = home / "table.json", home / "validate.json"
    common = [f"conf={conf}", *overrides, "search_space=tiny", f"conf.table={table}", "progress=false"]
    rc, secs = _run([sys.executable, "-m", "nas.profile", *common, f"budget_min={budget_min:g}", f"out={table}",
                     *([] if watch else ["profile.watch=false"])],
                    env=env, timeout=timeout, log=log)
    out: dict[str, Any] = {"overrides": overrides, "profile_exit": rc, "profile_s": round(secs, 1)}
    if rc or not table.is_file():
        return out
    rc, secs = _run([sys.executable, "-m", "nas.validate", *common, f"n={n}", f"out={report}"], env=env,
                    timeout=timeout, log=log)
    out.update(validate_exit=rc, validate_s=round(secs, 1))
    meta = json.loads(table.read_text())["metadata"]
    out.update(device=meta["device"].get("name"), runtime=meta["runtime"], timer=meta["measurement"].get("timer"),
               table_reproducibility=meta.get("reproducibility"), entries=len(json.loads(table.read_text())["entries"]))
    if rc == 0 and report.is_file():
        rep = json.loads(report.read_text())
        out["methods"] = {m: rep["methods"][m] for m in ("predictor", "table_sum", "flops_linear") if m in rep["methods"]}
        out["network_reproducibility"] = (rep.get("reproducibility") or {}).get("as_built")
        out["minutes_measured"] = (rep.get("budget") or {}).get("minutes_measured")
        out["warning"] = rep.get("reproducibility_warning")
    return out


def _pct(s: dict | None, k: str) -> str:
    return f"{100 * s[k]:.1f}%" if s else "-"


def table_md(result: dict[str, Any]) -> str:
    """The legs side by side, as Markdown."""
    head = ("| timing | table re-timed within ±10% | predictor ±5% / ±10% | MAPE | τ | table sum ±10% | "
            "FLOPs-linear ±10% | minutes measuring | entries |\n|---|---|---|---|---|---|---|---|---|")
    rows = []
    for name, leg in result["legs"].items():
        if "skipped" in leg:
            rows.append(f"| {name} | skipped: {leg['skipped']} |||||||")
            continue
        m, rec = leg.get("methods") or {}, leg.get("table_reproducibility") or {}
        p = m.get("predictor")
        mins = leg.get("minutes_measured")
        mape, tau = (f"{p['mape']:.2f}%", f"{p['kendall_tau']:.2f}") if p else ("-", "-")
        rows.append(f"| {name} | {_pct(rec, 'within_10pct')} | "
                    f"{_pct(p, 'within_5pct')} / {_pct(p, 'within_10pct')} | {mape} | {tau} | "
                    f"{_pct(m.get('table_sum'), 'within_10pct')} | {_pct(m.get('flops_linear'), 'within_10pct')} | "
                    f"{f'{mins:.1f}' if mins else '-'} | {leg.get('entries', '-')} |")
    return "\n".join([head, *rows])


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rehearse", action="store_true", help="run every step on this machine's CPU, small")
    ap.add_argument("--budget-min", type=float, default=None, help="minutes of measuring per timing (2; 0.1 rehearsed)")
    ap.add_argument("--eager-budget-min", type=float, default=None,
                    help="minutes for the eager timing (default: half of --budget-min; it is there for its "
                         "reproducibility, beside the graph timing)")
    ap.add_argument("--n", type=int, default=None, help="held-out networks per validation (40; 6 rehearsed)")
    ap.add_argument("--legs", nargs="+", default=list(LEGS), choices=list(LEGS))
    ap.add_argument("--skip-tests", action="store_true")
    ap.add_argument("--out", type=Path, default=RESULTS / "gpu_check.json")
    ap.add_argument("--keep", type=Path, default=None,
                    help="copy each timing's table and validation report here (<timing>_table.json, ...)")
    ap.add_argument("--log", type=Path, default=None, help="the commands' output (default: beside --out, .log)")
    a = ap.parse_args(argv)
    budget = a.budget_min if a.budget_min is not None else (0.1 if a.rehearse else 2.0)
    n = a.n if a.n is not None else (6 if a.rehearse else 40)
    if not a.rehearse and not torch.cuda.is_available():
        raise SystemExit("python -m benchmarks gpu: torch sees no CUDA GPU here; run with --rehearse to try the steps on the CPU")
    legs_conf = REHEARSAL_LEGS if a.rehearse else LEGS
    conf = "here" if a.rehearse else "here_gpu"
    a.out.parent.mkdir(parents=True, exist_ok=True)
    log_path = a.log or a.out.with_suffix(".log")
    t0 = time.monotonic()
    result: dict[str, Any] = {
        "command": command("gpu", ["--rehearse"] if a.rehearse else []), "rehearsal": a.rehearse,
        "torch": torch.__version__, "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "budget_min": budget, "n": n, "legs": {},
    }
    with open(log_path, "w") as log, tempfile.TemporaryDirectory(prefix="hwnas_gpu_check_") as work:
        env = {**os.environ, "HWNAS_HOME": str(Path(work) / "tests")}
        if not a.skip_tests:
            rc, secs = _run([sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", "-rs",
                             *GPU_TEST_FILES], env=env, timeout=240, log=log)
            result["gpu_tests"] = {"exit": rc, "seconds": round(secs, 1)}
            print(f"GPU tests: exit {rc} in {secs:.0f} s", flush=True)
        for name in a.legs:
            why = _ort_cuda() if name == "ort_graph" and not a.rehearse else None
            if why:
                result["legs"][name] = {"skipped": why}
                print(f"{name}: skipped ({why})", flush=True)
                continue
            mins = (a.eager_budget_min if a.eager_budget_min is not None else budget / 2) if name == "eager" else budget
            leg = run_leg(name, legs_conf[name], conf=conf, budget_min=mins, n=n, work=Path(work), log=log,
                          timeout=60 * mins + 240, watch=not a.rehearse)
            leg["budget_min"] = mins
            result["legs"][name] = leg
            if a.keep:
                a.keep.mkdir(parents=True, exist_ok=True)
                for f in ("table.json", "validate.json"):
                    if (Path(work) / name / f).is_file():
                        shutil.copy(Path(work) / name / f, a.keep / f"{name}_{f}")
            print(f"{name}: profile exit {leg['profile_exit']} ({leg['profile_s']} s), validate exit "
                  f"{leg.get('validate_exit', '-')} ({leg.get('validate_s', '-')} s)", flush=True)
    result["seconds"] = round(time.monotonic() - t0, 1)
    md = table_md(result)
    write_result(a.out, {**result, "machine": machine()},
                 table=f"{result['gpu'] or 'CPU rehearsal'}, torch {result['torch']}, budget {budget:g} min, n={n}\n\n{md}")
    print(md)
    print(f"{result['seconds']:.0f} s in all; results: {a.out}, log: {log_path}")
    failed = [k for k, v in result["legs"].items() if v.get("profile_exit") or v.get("validate_exit")]
    if failed or (result.get("gpu_tests") or {}).get("exit", 0) not in (0, 5):
        print(f"FAILED: {', '.join(failed) or 'GPU tests'} (see {log_path})", file=sys.stderr)
        raise SystemExit(1)
    return result


if __name__ == "__main__":
    main()
