#!/usr/bin/env bash
# check_loom_tool.sh - the `loom` command runs on a machine without a GPU:
# `loom env` lists every setting of both tables (src/core/param.h and
# support/tool_param.h) and every one a layer declares where it uses it
# (LOOM_PARAM_INT / _STR), each once, and exits 0; `loom version` exits 0;
# the language's subcommands: `loom check` types every examples/lang program,
# `loom check --protocols` proves a schedule's protocols, `loom schedules`
# and `loom interp` run on one, `loom check --lowered --emit` prints a
# schedule's lowered form and generated kernels, each (and `loom run` and
# `loom tune`) has --help, `loom tune` refuses an unknown option (exit 2) and
# lists its candidates without a GPU (--list: the program as written first,
# Adam's RS-Opt-AG not eligible at W = 2, an FP32 MatMul refused), a
# program with an error exits 1 naming file:line:column, and `loom-bench
# lang --list` (the loom-bench beside the loom binary) lists its cases
# without a GPU.
# Usage: bash tests/check_loom_tool.sh build/bin/loom
set -u
tool=$(realpath "${1:?usage: check_loom_tool.sh LOOM_BINARY}")
cd "$(dirname "$0")/.." || exit 1 # the headers it reads are the repository's
fail=0
out=$("$tool" env) || { echo "check_loom_tool: '$tool env' exited $?"; exit 1; }
# the declared names: both tables' rows, and the settings a layer declares
# where it uses them (LOOM_PARAM_INT / LOOM_PARAM_STR in src/)
declared() {
  grep -hoE '^ *X\([A-Z0-9_]+,' src/core/param.h support/tool_param.h | sed -E 's/^ *X\(([A-Z0-9_]+),/\1/'
  grep -rhoE '^LOOM_PARAM_(INT|STR)\([A-Z0-9_]+,' src | sed -E 's/^LOOM_PARAM_(INT|STR)\(([A-Z0-9_]+),/\2/'
}
for name in $(declared); do
  c=$(printf '%s\n' "$out" | grep -c "^LOOM_${name} ")
  [ "$c" = 1 ] || { echo "check_loom_tool: LOOM_${name} listed $c times by 'loom env'"; fail=1; }
done
rows=$(printf '%s\n' "$out" | grep -c '^LOOM_')
decl=$(declared | wc -l)
[ "$rows" = "$decl" ] || { echo "check_loom_tool: 'loom env' lists $rows settings, $decl are declared"; fail=1; }
"$tool" version > /dev/null || { echo "check_loom_tool: '$tool version' failed"; fail=1; }
for f in examples/lang/*.loom; do
  "$tool" check "$f" > /dev/null || { echo "check_loom_tool: 'loom check $f' failed"; fail=1; }
done
for c in check schedules interp run tune; do
  "$tool" $c --help | grep -q "^usage: loom $c" || { echo "check_loom_tool: 'loom $c --help' prints no usage"; fail=1; }
done
"$tool" schedules examples/lang/model_parallel.loom --bind B=8,S=1024,H=3072 | grep -q "^#1 " ||
  { echo "check_loom_tool: 'loom schedules' lists no schedule"; fail=1; }
"$tool" interp examples/lang/adam.loom --world 4 --bind N=64 --schedule best | grep -q "(bit-exact)" ||
  { echo "check_loom_tool: 'loom interp --schedule best' does not match the unscheduled program"; fail=1; }
"$tool" check examples/lang/llama_tp.loom --schedule best --protocols | grep -q "gemmRs .*gemm_rs .*no deadlock, no race" ||
  { echo "check_loom_tool: 'loom check --protocols' does not prove the llama_tp schedule's gemm_rs stage"; fail=1; }
"$tool" check examples/lang/model_parallel.loom --schedule best --lowered --emit --world 4 --bind B=2,S=3,H=8 |
  grep -q 'loom_cg_unit' || { echo "check_loom_tool: 'loom check --emit' prints no generated kernel"; fail=1; }
out=$("$tool" tune examples/lang/adam.loom --bind N=4096 --world 2 --depth 2 --max 10 --list)
printf '%s\n' "$out" | sed -n 2p | grep -qE '^ +0 +unscheduled ' &&
  printf '%s\n' "$out" | grep -qE ' best .*not eligible: input [0-9] \(`[mv]`\) is Sliced\(0\)' ||
  { echo "check_loom_tool: 'loom tune --list' does not list the default first and Adam's best as not eligible: $out"; fail=1; }
"$tool" tune examples/lang/adam.loom --bind N=64 --bogus > /dev/null 2>&1
[ $? = 2 ] || { echo "check_loom_tool: 'loom tune --bogus' does not exit 2"; fail=1; }
f32=$(mktemp)
printf 'Tensor a(FP32, [M, K], Sliced(1), WORLD);\nTensor w(FP32, [K, N], Sliced(0), WORLD);\nVar c = MatMul(a, w);\nVar s = AllReduce("+", c);\nExecute mm({a, w}, {s});\n' > "$f32"
"$tool" tune "$f32" --bind M=4,K=8,N=8 --world 2 --depth 1 --list | grep -q ' unscheduled .*the code generator refuses it: .*fp32' ||
  { echo "check_loom_tool: 'loom tune --list' does not show the FP32 MatMul refused"; fail=1; }
rm -f "$f32"
bad=$(mktemp)
printf 'Tensor x(FP32, [N], Replicated);\nVar y = AllGather(x);\nExecute f({x}, {y});\n' > "$bad"
msg=$("$tool" check "$bad" 2>&1); rc=$?
rm -f "$bad"
[ $rc = 1 ] && printf '%s' "$msg" | grep -q ':2:9: AllGather: operand `x` is Replicated; AllGather needs Sliced(d)' ||
  { echo "check_loom_tool: 'loom check' of an ill-typed program: exit $rc, '$msg'"; fail=1; }
bench="$(dirname "$tool")/loom-bench"
out=$(CUDA_VISIBLE_DEVICES= "$bench" lang --list 2>&1)
printf '%s\n' "$out" | grep -qE '^adam +generated:best +best +N=16777216 +examples/lang/adam.loom +interpreter at N=65537 ' &&
  [ "$(printf '%s\n' "$out" | grep -cE '^(ar_norm|adam|lamb|gemm_bias) ')" = 4 ] &&
  [ "$(printf '%s\n' "$out" | grep -cE '^mp_layer +generated:(mm_ar_c|mm_rs_c_ag|fuse_rs_c_ag|overlap) +best\[:[1345]\] ')" = 4 ] ||
  { echo "check_loom_tool: 'loom-bench lang --list' does not list the cases and Figure 11's four schedules: $out"; fail=1; }
out=$(CUDA_VISIBLE_DEVICES= "$bench" lang --list --quick --case ar_norm 2>&1)
printf '%s\n' "$out" | grep -qE '^ar_norm +generated:fused +fused +R=1024,C=4096 ' && ! printf '%s\n' "$out" | grep -q '^adam ' ||
  { echo "check_loom_tool: 'loom-bench lang --list --quick --case ar_norm' does not list that case alone: $out"; fail=1; }
[ $fail = 0 ] && echo "check_loom_tool: loom env lists the $decl settings, loom version runs, loom check (--protocols)/schedules/interp/tune --list work, loom-bench lang --list works"
exit $fail
