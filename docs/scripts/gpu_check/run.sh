# The GPU check as one device call (README.md beside this): build llama-cpp-python with CUDA
# from the carried sdist, then either cut the draft from the carried target and run check.py
# (`bash run.sh`), or make a 7B-class pair with a 262k vocabulary there and run pair_check.py
# (`bash run.sh pair`), or on that pair trace the controller's steps with pair_trace.py
# (`bash run.sh trace`).
set -x
MODE=${1:-demo}
R=$PWD
G=docs/scripts/gpu_check
nvidia-smi --query-gpu=name,driver_version --format=csv; nvcc --version | tail -1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
(cd /tmp && tar xJf "$R/.gpu/lcp.tar.xz") || exit 1
export CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90-real -DGGML_CUDA_FA=OFF -DGGML_CUDA_NCCL=OFF -DLLAVA_BUILD=OFF"
export CMAKE_BUILD_PARALLEL_LEVEL=$(nproc)
T0=$(date +%s)
SRC=$(ls -d /tmp/llama_cpp_python-*/ | head -1)  # the version pyproject.toml pins (README.md)
python3 -m pip install --no-build-isolation --no-deps --no-index --no-cache-dir --target /tmp/site "$SRC" > "$OUT/build.log" 2>&1 || { tail -60 "$OUT/build.log"; exit 2; }
echo "build took $(( $(date +%s) - T0 )) s"
export PYTHONPATH=/tmp/site:$R
SCRIPT=pair_check.py; [ "$MODE" = trace ] && SCRIPT=pair_trace.py
if [ "$MODE" = pair ] || [ "$MODE" = trace ]; then
  T0=$(date +%s)
  python3 $G/synth_gguf.py .gpu/tokenizer.gguf /tmp/target.gguf --vocab 262144 --embd 4096 --layers 32 --ff 14336 --heads 32 --kv-heads 8 || exit 3
  python3 $G/truncate_gguf.py /tmp/target.gguf /tmp/draft.gguf 4 || exit 3
  echo "models made in $(( $(date +%s) - T0 )) s"; ls -la /tmp/target.gguf /tmp/draft.gguf
  REPS=${REPS:-3} PYTHONUNBUFFERED=1 timeout ${LIMIT:-240} python3 -X faulthandler $G/$SCRIPT /tmp/target.gguf /tmp/draft.gguf 2>&1 | tee "$OUT/$MODE.log" | grep -E "^\{|Fatal|File |Error"
  exit 0
fi
python3 $G/truncate_gguf.py .gpu/target.gguf /tmp/draft.gguf 6 || exit 3
REPS=${REPS:-2} PYTHONUNBUFFERED=1 timeout 200 python3 -X faulthandler $G/check.py .gpu/target.gguf /tmp/draft.gguf 2>&1 | grep -E '^\{|Fatal|File "' | tee "$OUT/check.txt"
