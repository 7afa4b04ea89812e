#!/usr/bin/env bash
# The prepared GPU check (python -m benchmarks gpu) on a GPU machine with torch and no package index.
#
#   here, once:        bash benchmarks/gpu_check.sh --fetch     # the wheels the GPU machine lacks, into .whl/
#   on the GPU:        bash benchmarks/gpu_check.sh [python -m benchmarks gpu options]   # installs .whl/*.whl, then runs the check
#   here, rehearsed:   bash benchmarks/gpu_check.sh --rehearse  # every step on the CPU, small
#
# The GPU machine needs Python with CUDA torch, timm, onnx, onnxscript, onnxruntime, scikit-learn, scipy,
# numpy, matplotlib, tqdm, PyYAML and pytest; WHEELS below are what such an image commonly lacks (all pure
# Python but SQLAlchemy and greenlet, fetched for PY_VERSION).  Results: benchmarks/results/gpu_check.{json,md,log},
# or under $OUT when it is set.
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS=(optuna==5.0.0 hydra-core==1.3.8 omegaconf==2.3.1 SQLAlchemy==2.1.9 alembic==1.20.1 colorlog==6.12.0
        Mako==1.4.3 greenlet==3.5.6)
PY_VERSION=${PY_VERSION:-3.12}

if [ "${1:-}" = "--fetch" ]; then
    mkdir -p .whl
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PY_VERSION" --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d .whl "${WHEELS[@]}"
    python3 -m pip wheel -q --no-deps -w .whl antlr4-python3-runtime==4.9.3  # omegaconf's; published as source only
    ls .whl
    exit 0
fi

out_args=()
if [ -n "${OUT:-}" ]; then
    out_args=(--out "$OUT/gpu_check.json" --keep "$OUT")
fi
if [ "${1:-}" != "--rehearse" ] && compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/hwnas_site .whl/*.whl
    export PYTHONPATH="/tmp/hwnas_site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg
exec python3 -m benchmarks gpu "${out_args[@]}" "$@"
