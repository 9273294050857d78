#!/usr/bin/env bash
# gpu_session.sh — everything one device-machine call does, in order, each
# step independent (a failing step is logged and the next one runs):
#   build (unless a carried build dir works), the GPU test suite, dit_block at
#   full size with stage checks, the benchmark suite, SASS and ncu evidence,
#   compute-sanitizer on the GPU tests.
# Logs and JSON go to $OUT (or ./out); tools/gpu_call.sh wraps a device call
# around it (logs packed as they grow). Usage: tools/gpu_session.sh [steps...]
# with steps from: build tests block bench sass ncu (the attention kernels at
# S = H3_NCU_SEQ, default 30272, and the lab variants of H3_NCU_VARIANTS)
# sanitize (default: all),
# and on request: fa3 (FlashAttention-3 built from .peers/fa3, a checkout or
# its .tar.gz, into /tmp/fa3, in the background; the steps after it go on), profiles
# (tools/bench/profiles.sh: both data profiles, ours and the peers; waits for
# fa3; H3_VARIANTS adds lab variants), ab (lab/sm90_ab.sh on the
# model-like q/k/v at each S of H3_AB_SEQS, default 30272, for the lab variants in H3_AB_VARIANTS).
# H3_LAB=1 configures the build with the lab (-DH3_LAB=ON), H3_SPLIT_GRID=0
# without the Hopper kernel's split CTAs in the launch (-DH3_SM90_SPLIT_GRID=OFF); variants
# (test_gpu_attention's cases, then --case 4096 56 4, on each lab variant of
# H3_TEST_VARIANTS; one whose run times out is left out of the steps after it,
# one whose run fails out of the ab, scaling and ncu steps); sweeps
# (its shape sweep on each lab variant of H3_SWEEP_VARIANTS); cases
# (test_gpu_attention's model-like cases at S = 30272, the default kernels
# and each lab variant of H3_CASE_VARIANTS); blocks (dit_block with stage
# checks on both data profiles: S = 30272 in both GEMM modes, 4096 and 75600
# in BF16 mode; then each 30272 output against an FP32 PyTorch block, as a
# share of the block's update: compare_*.json); pkg (pip install ./python
# from the carried wheels into /tmp/pkg, then one call of the installed
# package); repro (issue 31's sharpened block: tools/bench/sharpen_block.py,
# dit_block with stage checks, both GEMM modes, default kernel and --smooth-v
# off); runsh (tools/run.sh itself, both GEMM modes, H3_CUDA_ARCHS=90a);
# probe (tools/bench/block_probe.sh on the model-like block at S = 30272:
# clock and power with attention alone and in the block, ncu of one block
# run; H3_PROBE_GEMM, default fp8); torchblock (tools/bench/torch_block.py,
# the PyTorch block eager and compiled, on the model-like block at S = 30272);
# pybench (the Python package against the PyTorch peers on the model-like
# q, k, v at H3_PYBENCH_SEQS, then diffusers' block with each processor,
# eager and compiled: tools/bench/diffusers_block.py; pyattn and pyblock are
# its two halves; H3_FA3_PATH, a build_fa3.sh output, adds fa3_* impls);
# scaling (tools/bench/scaling.sh: attention at every S of H3_SCALING_SEQS,
# default 2048,4096,8192, and H of H3_SCALING_HEADS, default 1,6,12,28,56,112,
# ours, the lab variants of H3_SCALING_VARIANTS, cuDNN FP8, FA3 FP8 and, with
# .peers/flashinfer_min, FlashInfer FP8, and the fit into fixed, per-row and
# per-pair costs).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0
steps=${*:-build tests block bench sass ncu sanitize}
steps=${steps//pybench/pyattn pyblock}
log() { echo "== $(date +%T) $*" | tee -a "$OUT/session.log"; }
summary=()
hung= # lab variants whose test_gpu_attention run timed out: later steps leave them out
failed= # and those whose run failed: the timing steps (ab, scaling, ncu) leave them out too
is_hung() { [[ " $hung " == *" $1 "* ]]; }
is_bad() { is_hung "$1" || [[ " $failed " == *" $1 "* ]]; }
keep_good() { # STEP LIST: the variants of LIST (commas or spaces) that are not is_bad, in $kept
  local v; kept=
  for v in $(tr , " " <<<"$2"); do
    if is_bad "$v"; then summary+=("$1: v$v left out, its tests failed or timed out"); else kept+=" $v"; fi
  done
}
lab_test() { # V LOG [ARGS...]: test_gpu_attention ARGS on lab variant V into LOG; a timeout marks V hung
  local v=$1 lg=$2 rc; shift 2
  timeout 300 "$BUILD/tests/test_gpu_attention" "$@" --variant "$v" >"$lg" 2>&1
  rc=$?; [ $rc = 124 ] && hung+=" $v"; [ $rc != 0 ] && [ $rc != 124 ] && failed+=" $v"
  summary+=("test_gpu_attention${*:+ $*} --variant $v: rc=$rc $(grep -E 'passed|failed' "$lg" | tail -1)")
  grep -E "FAIL" "$lg" | head -5
}
# The carried json-c (.debs: Debian's libjson-c-dev and libjson-c5), unpacked
# once into /tmp/jsonc and found through pkg-config; linked statically, since
# the GPU machine has no libjson-c.so at run time.
carried_jsonc() {
  [ -d .debs ] && ! pkg-config --exists json-c 2>/dev/null || return 0
  if [ ! -d /tmp/jsonc ]; then
    mkdir -p /tmp/jsonc && for f in .debs/*.deb; do dpkg -x "$f" /tmp/jsonc; done
    sed -i "s|/usr|/tmp/jsonc/usr|g" /tmp/jsonc/usr/lib/x86_64-linux-gnu/pkgconfig/json-c.pc
  fi
  export PKG_CONFIG_PATH=/tmp/jsonc/usr/lib/x86_64-linux-gnu/pkgconfig H3_CMAKE_ARGS="-DH3_JSONC_STATIC=ON ${H3_CMAKE_ARGS:-}"
}
# the data profiles' block, inputs and q/k/v: prof_files, prof_qkv
source tools/bench/prof_files.sh
# the Python package from this build (pyattn, pyblock)
py_env() { export H3BLOCK_LIBRARY=$(cd "$BUILD" && pwd)/libh3block.so PYTHONPATH=$PWD/python/src:${PYTHONPATH:-}; }
# CMake build dirs hold absolute paths of the machine they were made on: make
# the lead machine's path resolve here too.
if [ -n "${H3_SRC_PATH:-}" ] && [ ! -e "$H3_SRC_PATH" ]; then mkdir -p "$(dirname "$H3_SRC_PATH")"; ln -s "$PWD" "$H3_SRC_PATH"; fi
BUILD=${H3_BUILD:-build-dev}
# carried wheels (.whl: the cuDNN frontend for the FP8 peer; diffusers 0.42.1 and
# huggingface_hub 1.33.0 for test_python_package_gpu and pyblock), once per machine
if compgen -G ".whl/*.whl" >/dev/null && [ ! -d /tmp/site ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl >"$OUT/wheels.log" 2>&1 ||
    echo "gpu_session: wheels did not install (see wheels.log)"
fi
[ -d /tmp/site ] && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
# a prebuilt FA3 (build_fa3.sh's BUILD_DIR without src/, ~6 MB) carried as
# .peers/fa3min serves the profiles and pyattn steps without the fa3 step
[ -z "${H3_FA3_PATH:-}" ] && [ -f .peers/fa3min/flash_attn_interface.py ] && export H3_FA3_PATH=$PWD/.peers/fa3min
# and a prebuilt FlashInfer (build_flashinfer.sh's output, ~25 MB) as .peers/flashinfer_min
[ -z "${H3_FLASHINFER_PATH:-}" ] && [ -f .peers/flashinfer_min/flashinfer_build.json ] && export H3_FLASHINFER_PATH=$PWD/.peers/flashinfer_min
for s in $steps; do
  case $s in
  build)
    log build
    if [ -x "$BUILD/dit_block" ] && "$BUILD/dit_block" --help >/dev/null 2>&1; then
      log "using carried $BUILD"; summary+=("build: carried")
    else
      carried_jsonc
      BUILD=${H3_BUILD:-build-gpu} # under /tmp it survives between the calls of one warm machine
      if cmake -S . -B $BUILD -DH3_CUDA_ARCHS=90a -DH3_JSONC_STATIC=ON -DH3_LAB=$([ "${H3_LAB:-0}" = 1 ] && echo ON || echo OFF) \
           -DH3_SM90_SPLIT_GRID=$([ "${H3_SPLIT_GRID:-1}" = 0 ] && echo OFF || echo ON) \
           -DH3_TORCH_PYTHON="$(command -v python3)" >"$OUT/build.log" 2>&1 &&
         cmake --build $BUILD -j16 >>"$OUT/build.log" 2>&1; then summary+=("build: ok"); else summary+=("build: FAILED"); tail -30 "$OUT/build.log"; fi
    fi ;;
  tests)
    log tests
    carried_jsonc # test_install configures a fresh build that needs json-c
    ctest --test-dir "$BUILD" --output-on-failure -j4 --timeout ${H3_CTEST_TIMEOUT:-500} ${H3_CTEST_ARGS:-} >"$OUT/ctest.log" 2>&1
    summary+=("tests: $(grep -E 'tests passed|tests failed' "$OUT/ctest.log" | tail -1)")
    grep -E "Failed|\*\*\*|Not Run" "$OUT/ctest.log" | head -20 ;;
  block)
    log "dit_block full size"
    [ -f weights/block0.safetensors ] || "$BUILD/tools/gen_weights" --seed 0 --out weights/block0.safetensors >"$OUT/gen.log" 2>&1
    for gemm in bf16 fp8; do
      timeout 300 "$BUILD/dit_block" --gemm $gemm --weights weights/block0.safetensors --json "$OUT/block_$gemm.json" \
        --output /tmp/ours_$gemm.safetensors >"$OUT/block_$gemm.log" 2>&1
      rc=$?; summary+=("dit_block --gemm $gemm: rc=$rc $(grep -E '^block total' "$OUT/block_$gemm.log" | tr -s ' ' | tr '\n' ';')"); tail -50 "$OUT/block_$gemm.log"
    done ;;
  bench)
    log bench
    if [ -x tools/bench/run_all.sh ]; then timeout 570 tools/bench/run_all.sh "$BUILD" >"$OUT/bench.log" 2>&1; summary+=("bench: rc=$?"); tail -40 "$OUT/bench.log"; fi ;;
  sass)
    log sass
    for f in "$BUILD"/CMakeFiles/h3kernels.dir/kernels/attn_fp8_*.cu.o; do
      cuobjdump --dump-sass "$f" >"$OUT/$(basename "$f" .cu.o).sass" 2>&1
      echo "$(basename "$f"): $(grep -c QGMMA "$OUT/$(basename "$f" .cu.o).sass") QGMMA, $(grep -cE 'HMMA|QMMA' "$OUT/$(basename "$f" .cu.o).sass") HMMA/QMMA, $(grep -cE 'LDL|STL' "$OUT/$(basename "$f" .cu.o).sass") LDL/STL"
    done | tee -a "$OUT/session.log" ;;
  ncu) # the three launches: attn_fp8_mma, attn_fp8_sm90 without and with a V mean, at S = H3_NCU_SEQ
    ncu_seq=${H3_NCU_SEQ:-30272}
    log "ncu at S = $ncu_seq"
    if [ -x "$BUILD/tools/bench/bench_attn" ]; then
      timeout 200 ncu --clock-control none --kernel-name regex:attn_fp8 --launch-count 3 \
        --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
        --section Occupancy --section LaunchStats --section WarpStateStats \
        "$BUILD/tools/bench/bench_attn" --seqs "$ncu_seq" --kernels mma,sm90 --no-selfcheck --warmup 0 --reps 1 >"$OUT/ncu.log" 2>&1
      summary+=("ncu: rc=$?")
      ncu_metrics=sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,sm__cycles_active.min,sm__cycles_active.avg,sm__cycles_active.max,sm__cycles_elapsed.max
      timeout 100 ncu --clock-control none --kernel-name regex:attn_fp8 --launch-count 3 --metrics "$ncu_metrics" \
        "$BUILD/tools/bench/bench_attn" --seqs "$ncu_seq" --kernels mma,sm90 --no-selfcheck --warmup 0 --reps 1 >>"$OUT/ncu.log" 2>&1
      grep -E "attn_fp8|Throughput|Pipe|Occupancy|Registers|pct|sum |Bank|Duration|Waves|cycles_active|cycles_elapsed" "$OUT/ncu.log" | head -90
      keep_good ncu "${H3_NCU_VARIANTS:-}"
      for v in $kept; do # lab variants (-DH3_LAB=ON): same metrics, one launch
        # wg3: the attention kernel of every wg3 variant (not v160's key-norm pass before it)
        timeout 100 ncu --clock-control none --kernel-name regex:wg3 --launch-count 1 --metrics "$ncu_metrics" \
          "$BUILD/tools/bench/bench_attn" --variant "$v" --seqs "$ncu_seq" --no-selfcheck --warmup 0 --reps 1 \
          >"$OUT/ncu_v$v.log" 2>&1
        summary+=("ncu v$v: rc=$?"); grep -E "wg3|cycles_active|cycles_elapsed|pct" "$OUT/ncu_v$v.log" | head -12
      done
    fi ;;
  fa3)
    log "fa3 build (background)"
    if [ -d .peers/fa3 ]; then
      (bash tools/bench/build_fa3.sh .peers/fa3 /tmp/fa3 >"$OUT/fa3_build.log" 2>&1; echo "rc=$?" >>"$OUT/fa3_build.log") &
      fa3_pid=$!
    else
      summary+=("fa3: no .peers/fa3 (carry it: a flash-attention checkout or its .tar.gz)")
    fi ;;
  profiles)
    if [ -n "${fa3_pid:-}" ]; then log "waiting for the fa3 build"; wait "$fa3_pid"; summary+=("fa3 build: $(tail -1 "$OUT/fa3_build.log")"); fa3_pid=; fi
    log profiles
    H3_FA3_PATH=${H3_FA3_PATH:-/tmp/fa3} timeout 560 bash tools/bench/profiles.sh "$BUILD" "${H3_PROF_SEQS:-8192,30272,75600}" >"$OUT/profiles.log" 2>&1
    summary+=("profiles: rc=$?"); tail -40 "$OUT/profiles.log" ;;
  cases)
    log "model-like attention cases"
    for v in default ${H3_CASE_VARIANTS:-}; do
      args=(); [ "$v" = default ] || args=(--variant "$v")
      H3_TEST_SEED=${H3_TEST_SEED:-1} timeout 120 "$BUILD/tests/test_gpu_attention" "${args[@]}" --case 30272 2 4 >"$OUT/case_$v.log" 2>&1
      summary+=("case 30272 2 model-like, $v: rc=$?"); cat "$OUT/case_$v.log"
    done ;;
  variants)
    log "test_gpu_attention on lab variants"
    for v in ${H3_TEST_VARIANTS:-}; do
      lab_test "$v" "$OUT/test_v$v.log"
      # and S = 4096 at H = 56 on the model-like data: a persistent variant's CTAs take ~9 items each
      is_bad "$v" || lab_test "$v" "$OUT/test_v${v}_4096.log" --case 4096 56 4
    done ;;
  sweeps)
    log "test_gpu_attention --sweep on lab variants"
    for v in ${H3_SWEEP_VARIANTS:-}; do
      is_hung "$v" && { summary+=("test_gpu_attention --sweep --variant $v: not run (its cases timed out)"); continue; }
      lab_test "$v" "$OUT/sweep_v$v.log" --sweep
    done ;;
  blocks)
    # H3_BLOCK_RUNS: PROFILE:S:GEMM items (default: both profiles, 30272 in
    # both GEMM modes, 4096 and 75600 in BF16; GEMM fp8: --gemm fp8 with its
    # default scales (blocks where they run), fp8b / fp8r: --gemm-scales
    # blocks / rows named, fp8f: --gemm-accum fast); every 30272 output is then compared with an FP32
    # PyTorch block of the profiles in H3_F32_PROFILES
    log "dit_block on the data profiles"
    runs=${H3_BLOCK_RUNS:-"model:30272:bf16 model:30272:fp8 model:30272:fp8r uniform:30272:bf16 uniform:30272:fp8 uniform:30272:fp8r model:4096:bf16 uniform:4096:bf16 model:75600:bf16 uniform:75600:bf16"}
    for item in $runs; do
      IFS=: read -r prof S gemm <<<"$item"
      prof_files $prof $S
      tag=${prof}_${S}_$gemm
      gargs=(--gemm "$gemm")
      case $gemm in fp8b) gargs=(--gemm fp8 --gemm-scales blocks) ;; fp8r) gargs=(--gemm fp8 --gemm-scales rows) ;;
        fp8f) gargs=(--gemm fp8 --gemm-accum fast) ;; esac
      timeout 200 "$BUILD/dit_block" --weights "$W" --input "$IN" "${gargs[@]}" --quiet --json "$OUT/block_$tag.json" \
        $([ $S = 30272 ] && echo --output /tmp/ours_$tag.safetensors) >"$OUT/block_$tag.log" 2>&1
      rc=$?; summary+=("dit_block $tag: rc=$rc $(grep -E '^block total ' "$OUT/block_$tag.log" | tr -s ' ')")
      grep -E "^attention|FAIL|^block total " "$OUT/block_$tag.log" | head -6
    done
    for prof in ${H3_F32_PROFILES:-model uniform}; do
      timeout 200 python3 tools/bench/torch_block.py --weights $P/block_$prof.safetensors \
        --input $P/inputs_${prof}_30272.safetensors --dtype fp32 --output /tmp/ref_f32_$prof.safetensors \
        >"$OUT/torch_f32_$prof.log" 2>&1 || tail -5 "$OUT/torch_f32_$prof.log"
      for gemm in bf16 fp8 fp8b fp8r fp8f; do
        [ -f /tmp/ours_${prof}_30272_$gemm.safetensors ] || continue
        python3 tools/bench/compare_outputs.py /tmp/ours_${prof}_30272_$gemm.safetensors /tmp/ref_f32_$prof.safetensors \
          --input $P/inputs_${prof}_30272.safetensors --json "$OUT/compare_${prof}_$gemm.json" 2>&1 | tail -3
      done
    done ;;
  ab)
    log "sm90_ab on the model-like q/k/v"
    keep_good ab "${H3_AB_VARIANTS:-147,150}"
    abv=$(tr ' ' , <<<"${kept# }")
    [ -n "$abv" ] || continue
    abq=${H3_AB_QKV:-}
    if [ -z "$abq" ]; then # the model-like block's q, k, v at each S of H3_AB_SEQS, made here
      for S in $(tr , " " <<<"${H3_AB_SEQS:-30272}"); do prof_qkv model "$S"; abq=${abq:+$abq,}$QKV; done
    fi
    H3_AB_QKV=$abq timeout 400 bash lab/sm90_ab.sh "$BUILD" "$abv" "${H3_AB_ROUNDS:-3}" 20 >"$OUT/ab.log" 2>&1
    summary+=("ab: rc=$?"); tail -12 "$OUT/ab.log" ;;
  scaling)
    log "attention over S and H: ours and the FP8 peers"
    keep_good scaling "${H3_SCALING_VARIANTS:-}"
    H3_VARIANTS=$kept timeout 500 bash tools/bench/scaling.sh "$BUILD" \
      "${H3_SCALING_SEQS:-2048,4096,8192}" "${H3_SCALING_HEADS:-1,6,12,28,56,112}" >"$OUT/scaling.log" 2>&1
    summary+=("scaling: rc=$?"); tail -32 "$OUT/scaling.log" ;;
  pkg)
    log "pip install ./python"
    carried_jsonc # the library reads safetensors headers with json-c: static, as the machine has none
    python3 -m pip install -q --no-index --find-links .whl --no-build-isolation --target /tmp/pkg ./python \
      -C cmake.define.H3_CUDA_ARCHS=90a -C cmake.define.H3_JSONC_STATIC=ON -C build-dir=/tmp/pkgbuild \
      >"$OUT/pkg.log" 2>&1
    rc=$?
    (cd /tmp && PYTHONPATH=/tmp/pkg:${PYTHONPATH:-} python3 -c '
import torch, h3block
q = torch.randn(1, 4096, 8, 128, device="cuda", dtype=torch.bfloat16)
o = h3block.attention(q, q, q); torch.cuda.synchronize()
print("installed:", h3block.__file__, h3block.library_version(), h3block.attention_kernel(0), tuple(o.shape), bool(o.isfinite().all()))
') >>"$OUT/pkg.log" 2>&1
    summary+=("pip install ./python: rc=$rc; $(tail -1 "$OUT/pkg.log")") ;;
  repro)
    log "issue 31's sharpened block"
    P=/tmp/h3repro; mkdir -p $P
    [ -f $P/w.safetensors ] || "$BUILD/tools/gen_weights" --profile uniform --seed 0 --out $P/w.safetensors >/dev/null 2>&1
    [ -f $P/in.safetensors ] || "$BUILD/tools/gen_inputs" --profile uniform --tokens 30272 --seed 0 --out $P/in.safetensors >/dev/null
    [ -f $P/w2.safetensors ] || python3 tools/bench/sharpen_block.py --weights $P/w.safetensors --input $P/in.safetensors \
      --out-weights $P/w2.safetensors --out-input $P/in2.safetensors 2>&1 | tail -2
    for item in bf16:on fp8:on bf16:off; do
      IFS=: read -r gemm sv <<<"$item"
      timeout 200 "$BUILD/dit_block" --weights $P/w2.safetensors --input $P/in2.safetensors --gemm $gemm --smooth-v $sv \
        --quiet --json "$OUT/repro_${gemm}_$sv.json" >"$OUT/repro_${gemm}_$sv.log" 2>&1
      rc=$?; summary+=("repro $gemm smooth-v $sv: rc=$rc $(grep -E '^attention' "$OUT/repro_${gemm}_$sv.log" | tr -s ' ' | tr '\n' ';')")
      grep -E "^attention|FAIL|^block total " "$OUT/repro_${gemm}_$sv.log" | head -6
    done ;;
  runsh)
    log "tools/run.sh"
    carried_jsonc # what deps.sh would install from Debian where the network is reachable
    for gemm in bf16 fp8; do
      H3_CUDA_ARCHS=90a timeout 500 tools/run.sh --gemm $gemm --json "$OUT/runsh_$gemm.json" >"$OUT/runsh_$gemm.log" 2>&1
      rc=$?; summary+=("tools/run.sh --gemm $gemm: rc=$rc $(grep -E '^block total ' "$OUT/runsh_$gemm.log" | tr -s ' ')")
      grep -E "FAIL|^block total |checks" "$OUT/runsh_$gemm.log" | head -5
    done ;;
  probe)
    log "block probe: clocks, power and ncu of the block"
    prof_qkv model 30272
    timeout 550 bash tools/bench/block_probe.sh "$BUILD" "$W" "$IN" "$QKV" "${H3_PROBE_GEMM:-fp8}" >"$OUT/probe.log" 2>&1
    summary+=("block probe: rc=$?"); tail -45 "$OUT/probe.log" ;;
  torchblock)
    log "the PyTorch block (tools/bench/torch_block.py), eager and torch.compile"
    prof_files model 30272
    timeout 300 python3 tools/bench/torch_block.py --weights "$W" --input "$IN" --json "$OUT/torch_block.json" \
      >"$OUT/torch_block.log" 2>&1
    summary+=("torch block: rc=$? $(grep -E '^(eager|compiled) block' "$OUT/torch_block.log" | tr '\n' ';')")
    tail -8 "$OUT/torch_block.log" ;;
  pyattn)
    log "the Python package against the PyTorch peers"
    files=()
    for S in $(echo "${H3_PYBENCH_SEQS:-4096,8192,16384,30272,75600}" | tr , " "); do
      prof_qkv model $S
      [ -f "$QKV" ] && files+=("$QKV")
    done
    py_env
    timeout 400 python3 tools/bench/peers_attention.py --qkv "$(IFS=,; echo "${files[*]}")" \
      --impls "${H3_PYBENCH_IMPLS:-h3block,cudnn_bf16,flash_bf16,cudnn_fp8_e2e,cudnn_fp8}" ${H3_FA3_PATH:+--fa3-path "$H3_FA3_PATH"} \
      ${H3_FLASHINFER_PATH:+--flashinfer-path "$H3_FLASHINFER_PATH"} --json "$OUT/pybench_attention.json" >"$OUT/pybench.log" 2>&1
    summary+=("pybench attention: rc=$?"); grep -vE "^\s*$" "$OUT/pybench.log" | tail -30 ;;
  pyblock)
    log "diffusers' block with each attention processor"
    prof_files model 30272
    py_env
    timeout 300 python3 tools/bench/diffusers_block.py --weights "$W" --input "$IN" --json "$OUT/pybench_block.json" \
      --modes "${H3_PYBENCH_MODES:-eager,compile}" \
      >"$OUT/pybench_block.log" 2>&1
    summary+=("pybench diffusers block: rc=$?"); tail -8 "$OUT/pybench_block.log" ;;
  sanitize)
    log compute-sanitizer
    for tool in memcheck racecheck synccheck; do
      timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 "$BUILD/tests/test_gpu_attention" --quick >"$OUT/sanitizer_$tool.log" 2>&1
      summary+=("compute-sanitizer $tool (attention, S <= 1000): rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitizer_$tool.log" | tail -1)")
    done
    for tool in memcheck racecheck synccheck; do
      timeout 200 compute-sanitizer --tool $tool --error-exitcode 9 "$BUILD/tests/test_gpu_ops" --quick >"$OUT/sanitizer_ops_$tool.log" 2>&1
      summary+=("compute-sanitizer $tool (ops --quick): rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitizer_ops_$tool.log" | tail -1) $(grep -cE '^PASS' "$OUT/sanitizer_ops_$tool.log") PASS")
    done
    # the shape sweep's small shapes (every residue of every tile) under each tool
    for tool in memcheck racecheck synccheck; do
      timeout 200 compute-sanitizer --tool $tool --error-exitcode 9 "$BUILD/tests/test_gpu_attention" --sweep --max-s 300 >"$OUT/sanitizer_sweep_$tool.log" 2>&1
      summary+=("compute-sanitizer $tool (attention sweep, S <= 300): rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitizer_sweep_$tool.log" | tail -1) $(grep -E 'passed, .* failed' "$OUT/sanitizer_sweep_$tool.log" | tail -1)")
    done ;;
  esac
done
log done
printf '%s\n' "${summary[@]}" | tee -a "$OUT/session.log"
