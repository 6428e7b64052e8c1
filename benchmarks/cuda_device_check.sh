#!/usr/bin/env bash
# The CUDA backend's GPU check in one prepared run: on the device tool's GPU machine or any CUDA
# machine. Installs what is missing (CuPy; onnxruntime-gpu for the comparison), runs
# tests/test_cuda_backend.py (the GPU parity tests run only here) and benchmarks/cuda_vs_ort.py,
# and writes everything to $OUT:
#
#   OUT=/tmp/cuda_out bash benchmarks/cuda_device_check.sh          # tests + benchmark
#   PART=tests bash benchmarks/cuda_device_check.sh                 # or PART=bench
#   MODELS=digits,squeezenet RUNS=30 bash benchmarks/cuda_device_check.sh
#
# Without network (the device tool's machine reaches nothing), wheels placed in .whl/ are
# installed first (see /work/.library/device/README.md); onnxruntime-gpu (~250 MB) does not fit
# a carry, so there the comparison column reads n/a unless the image already has it.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/cuda_check_out}
PART=${PART:-all}
MODELS=${MODELS:-digits,squeezenet,resnet50,inception_v1,shufflenet}
RUNS=${RUNS:-50}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
PIP="$PY -m pip install -q --disable-pip-version-check --timeout 5 --retries 0"

if ls .whl/*.whl >/dev/null 2>&1; then
    $PIP --no-index --no-deps --no-compile --target /tmp/ei_site .whl/*.whl && export PYTHONPATH="/tmp/ei_site:$PYTHONPATH"
fi
if ! $PY -c "import cupy" 2>/dev/null; then
    $PIP --target /tmp/ei_site cupy-cuda13x 2>/dev/null || $PIP --target /tmp/ei_site cupy-cuda12x 2>/dev/null \
        || echo "CuPy could not be installed" | tee -a "$OUT/env.txt"
    export PYTHONPATH="/tmp/ei_site:$PYTHONPATH"
fi
if ! $PY -c "import onnxruntime as o, sys; sys.exit('CUDAExecutionProvider' not in o.get_available_providers())" 2>/dev/null; then
    # a separate folder first on the path: onnxruntime-gpu and onnxruntime share the module name
    $PIP --target /tmp/ei_ort onnxruntime-gpu 2>/dev/null && export PYTHONPATH="/tmp/ei_ort:$PYTHONPATH" \
        || echo "onnxruntime-gpu not installable here: no ORT CUDA comparison" | tee -a "$OUT/env.txt"
fi
{
    date -u
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1
    $PY -c "import cupy, numpy; print('cupy', cupy.__version__, 'cuda runtime', cupy.cuda.runtime.runtimeGetVersion(), 'numpy', numpy.__version__)" 2>&1
    $PY -c "import onnxruntime as o; print('onnxruntime', o.__version__, o.get_available_providers())" 2>&1
} >> "$OUT/env.txt"
cat "$OUT/env.txt"

status=0
if [ "$PART" = all ] || [ "$PART" = tests ]; then
    set -o pipefail
    $PY -m pytest -q tests/test_cuda_backend.py -rs -p no:cacheprovider 2>&1 | tee "$OUT/tests.txt" || status=1
    set +o pipefail
fi
if [ "$PART" = all ] || [ "$PART" = bench ]; then
    $PY benchmarks/cuda_vs_ort.py --models "$MODELS" --runs "$RUNS" --json "$OUT/bench.json" 2>&1 \
        | tee "$OUT/bench.txt" || status=1
    $PY benchmarks/cuda_vs_ort.py --models "$MODELS" --runs "$RUNS" --layout nhwc --no-int8 \
        --json "$OUT/bench_nhwc.json" 2>&1 | tee "$OUT/bench_nhwc.txt" || status=1
    # the launches one by one, for the CUDA graphs' gain
    EDGE_INFER_CUDA_GRAPHS=0 $PY benchmarks/cuda_vs_ort.py --models "$MODELS" --runs "$RUNS" --no-int8 \
        --json "$OUT/bench_no_graphs.json" 2>&1 | tee "$OUT/bench_no_graphs.txt" || status=1
    # zero-copy (mapped host memory) on this GPU, for the transfer-share comparison
    $PY benchmarks/cuda_vs_ort.py --models "$MODELS" --runs "$RUNS" --no-int8 --zero-copy on \
        --json "$OUT/bench_zero_copy.json" 2>&1 | tee "$OUT/bench_zero_copy.txt" || status=1
fi
exit $status
