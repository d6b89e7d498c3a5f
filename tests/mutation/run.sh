#!/usr/bin/env bash
# The mutation check (issue #18; docs/parallelism.md, "The mutation check"): plants each bug of
# tests/mutation/mutants.txt, one at a time, in a scratch copy of the tree, rebuilds only what the
# bug touches, runs the tests that must catch it, and fails unless every bug is caught.
#
#   bash tests/mutation/run.sh [--only ID[,ID...]] [--jobs N] [--out DIR] [--keep]
#                              [--scratch DIR] [--from-build DIR] [--list FILE] [--rev REV]
#
#   --only       these mutants only (ids of mutants.txt)
#   --jobs N     build and test jobs (default: nproc)
#   --out DIR    where mutation-<date>-<HHMM>-<commit>.md and .json go (default: the scratch
#                directory)
#   --keep       keep the scratch copy and its build (default: remove both, keep the logs)
#   --scratch    use DIR as the scratch directory, reusing a kept copy and build: only the files
#                that changed since are copied again, so only they are recompiled
#   --from-build the configured build directory whose cache options the scratch build takes
#                (WEFT_MPIEXEC_FLAGS, the compiler, ...; default build/release, if configured)
#   --list FILE  another mutant list (default tests/mutation/mutants.txt)
#   --rev REV    check commit REV's files instead of the working tree's (e.g. HEAD, while other
#                edits, or bugs planted by hand, are in the working tree)
#
# The scratch copy holds the files git knows (tracked, and untracked ones that are not ignored),
# as they are in the working tree, so uncommitted changes are checked too (or commit REV's files,
# with --rev); never a build directory. Its build is Release with -DWEFT_CUDA=OFF (the device
# path runs on the host emulation of the kernels, as in every CPU-only run). It builds only the test
# programs the mutants' tests run (and `weft`, which the CLI tests depend on), then runs every
# named test once unmutated: all must pass, or the check stops (a test that fails without a bug
# proves nothing). Then for each mutant: plant it, rebuild (ninja recompiles only the edited file
# and relinks what uses it), run its tests, record which failed, restore the file.
#
# Exit status: 0 when every mutant is caught; 1 when one survived, did not build, or its tests
# failed to run; 2 when the check itself cannot run (a mutant no longer applies to the code, a
# test regex names no test, the unmutated tests fail, the build fails).
set -euo pipefail
# The whole script is one block, which bash reads before running it: an edit of this file during a
# run (a run takes half an hour) cannot change what the run does.
{

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
LIST=$ROOT/tests/mutation/mutants.txt
TOOL=(python3 "$ROOT/tests/mutation/mutants.py")
ONLY="" KEEP=0 JOBS=$(nproc) OUT="" SCRATCH="" FROM=$ROOT/build/release REV=""

die() { echo "mutation: $*" >&2; exit 2; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --only) ONLY=$2; shift 2 ;;
    --jobs) JOBS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    --scratch) SCRATCH=$2; KEEP=1; shift 2 ;;
    --from-build) FROM=$2; shift 2 ;;
    --list) LIST=$2; shift 2 ;;
    --rev) REV=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option '$1' (--help lists them)" ;;
  esac
done
[[ $JOBS =~ ^[1-9][0-9]*$ ]] || die "--jobs takes a positive number, not '$JOBS'"
command -v python3 >/dev/null || die "needs python3"
command -v ninja >/dev/null || die "needs ninja (the scratch build is Ninja's)"

IDS_TEXT=$("${TOOL[@]}" ids "$LIST" ${ONLY:+--only "$ONLY"}) || exit 2
mapfile -t IDS <<<"$IDS_TEXT"
[[ -n $IDS_TEXT ]] || die "no mutants selected"
if [[ -n $REV ]]; then
  COMMIT=$(git -C "$ROOT" rev-parse --short=12 "$REV^{commit}") || die "--rev $REV is no commit"
else
  COMMIT=$(git -C "$ROOT" rev-parse --short=12 HEAD)
  if [[ -n $(git -C "$ROOT" status --porcelain --untracked-files=no) ]]; then COMMIT+="-dirty"; fi
fi

T_START=$SECONDS
SCRATCH=${SCRATCH:-$(mktemp -d "${TMPDIR:-/tmp}/weft-mutation.XXXXXX")}
mkdir -p "$SCRATCH"
SCRATCH=$(cd "$SCRATCH" && pwd)
TREE=$SCRATCH/tree BUILD=$SCRATCH/build LOGS=$SCRATCH/logs
mkdir -p "$TREE" "$LOGS"
OUT=${OUT:-$SCRATCH}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
echo "mutation: ${#IDS[@]} mutants; scratch $SCRATCH, logs $LOGS"

# A planted file is restored however the script ends (a kept scratch copy must stay clean).
PLANTED="" BACKUP=$LOGS/planted.orig
restore() {
  if [[ -n $PLANTED ]]; then
    cp "$BACKUP" "$TREE/$PLANTED"
    touch "$TREE/$PLANTED"  # newer than the mutant's objects: the next build recompiles it
    PLANTED=""
  fi
}
finish() {
  restore
  if [[ $KEEP == 0 ]]; then rm -rf "$TREE" "$BUILD"; fi
}
trap finish EXIT
trap 'exit 130' INT TERM

# 1. The scratch copy.
if [[ -n $REV ]]; then
  SNAP=$SCRATCH/snapshot
  rm -rf "$SNAP" && mkdir -p "$SNAP"
  git -C "$ROOT" archive --format=tar "$COMMIT" | tar -x -C "$SNAP"
  (cd "$SNAP" && find . -type f -printf '%P\0') | "${TOOL[@]}" sync "$SNAP" "$TREE" |
    sed "s/^/mutation: scratch copy of $COMMIT: /"
  rm -rf "$SNAP"
else
  (cd "$ROOT" && git ls-files -z --cached --others --exclude-standard) |
    "${TOOL[@]}" sync "$ROOT" "$TREE" | sed 's/^/mutation: scratch copy: /'
fi
# The list, checked against the copy before anything is built: a mutant whose text the code no
# longer has is an error of the check, never a silent skip.
"${TOOL[@]}" check "$LIST" "$TREE" "${IDS[@]}" ||
  die "the mutant list no longer applies to the code (above); update $LIST"

# 2. Its build: Release, no CUDA, the cache options of the main build that change what runs.
CACHE_ARGS=()
if [[ -f $FROM/CMakeCache.txt ]]; then
  for var in CMAKE_CXX_COMPILER CMAKE_CXX_COMPILER_LAUNCHER WEFT_NATIVE WEFT_MPIEXEC_FLAGS \
             MPIEXEC_EXECUTABLE WEFT_TORCH_PYTHON; do
    line=$(grep -m1 "^$var:[A-Z]*=" "$FROM/CMakeCache.txt" || true)
    if [[ -n $line ]]; then CACHE_ARGS+=("-D$line"); fi
  done
fi
echo "mutation: configuring (Release, WEFT_CUDA=OFF${CACHE_ARGS[*]:+, }${CACHE_ARGS[*]})"
cmake -S "$TREE" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DWEFT_CUDA=OFF \
  "${CACHE_ARGS[@]}" >"$LOGS/configure.log" 2>&1 ||
  { tail -30 "$LOGS/configure.log"; die "configuring the scratch build failed ($LOGS)"; }

# Each mutant's tests (names) and the programs they run (build targets).
declare -A WHAT FILE REGEX TARGETS
ALL_TARGETS=() ALL_TESTS=()
for id in "${IDS[@]}"; do
  WHAT[$id]=$("${TOOL[@]}" field "$LIST" "$id" what)
  FILE[$id]=$("${TOOL[@]}" field "$LIST" "$id" file)
  REGEX[$id]=$("${TOOL[@]}" field "$LIST" "$id" tests)
  ctest --test-dir "$BUILD" -N -R "${REGEX[$id]}" --show-only=json-v1 >"$LOGS/$id.tests.json"
  mapfile -t names < <(python3 -c \
    'import json,sys; print("\n".join(t["name"] for t in json.load(open(sys.argv[1]))["tests"]))' \
    "$LOGS/$id.tests.json")
  [[ -n ${names[0]:-} ]] || die "mutant $id: tests '${REGEX[$id]}' name no test of the build"
  ALL_TESTS+=("${names[@]}")
  TARGETS[$id]=$("${TOOL[@]}" test-targets "$BUILD" "$LOGS/$id.tests.json" | tr '\n' ' ')
  [[ -n ${TARGETS[$id]// /} ]] || die "mutant $id: its tests run no program of the build"
  read -ra ts <<<"${TARGETS[$id]}"
  ALL_TARGETS+=("${ts[@]}")
done
mapfile -t ALL_TARGETS < <(printf '%s\n' "${ALL_TARGETS[@]}" | sort -u)
# Every named test, by name (ctest's regular expressions take at most 9 groups: no union of the
# mutants' own).
UNION="^($(printf '%s\n' "${ALL_TESTS[@]}" | sort -u | paste -sd '|'))\$"

build() {  # build LOG TARGET...
  local log=$1
  shift
  cmake --build "$BUILD" --target "$@" -j "$JOBS" >"$log" 2>&1
}
# run_tests LOG REGEX: ctest's status; the failed tests' names into $LOGS/failed.
run_tests() {
  rm -f "$BUILD/Testing/Temporary/LastTestsFailed.log"
  local rc=0
  ctest --test-dir "$BUILD" -R "$2" -j "$JOBS" --no-tests=error --output-on-failure >"$1" 2>&1 ||
    rc=$?
  : >"$LOGS/failed"
  if [[ -f $BUILD/Testing/Temporary/LastTestsFailed.log ]]; then
    while IFS= read -r line; do
      local name=${line#*:}
      if grep -q "Test *#[0-9]*: $name \.*\*\*\*Timeout" "$1"; then name+="(timeout)"; fi
      echo "$name" >>"$LOGS/failed"
    done <"$BUILD/Testing/Temporary/LastTestsFailed.log"
  fi
  return $rc
}

# 3. Unmutated: everything builds and every named test passes.
T0=$SECONDS
echo "mutation: building ${#ALL_TARGETS[@]} targets: ${ALL_TARGETS[*]}"
build "$LOGS/build.log" "${ALL_TARGETS[@]}" ||
  { tail -30 "$LOGS/build.log"; die "the unmutated tree does not build ($LOGS/build.log)"; }
echo "mutation: built in $((SECONDS - T0)) s; running the tests unmutated"
T0=$SECONDS
if ! run_tests "$LOGS/unmutated.log" "$UNION"; then
  tail -40 "$LOGS/unmutated.log"
  die "unmutated, these tests fail: $(tr '\n' ' ' <"$LOGS/failed")($LOGS/unmutated.log)." \
    "A test that fails without a bug proves nothing: fix it first."
fi
{ grep -E '^ *[0-9]+/[0-9]+ Test' "$LOGS/unmutated.log" || true; } | sed 's/^/mutation:   /'
echo "mutation: unmutated tests pass ($((SECONDS - T0)) s)"

# 4. The mutants, one at a time.
: >"$LOGS/results.tsv"
for id in "${IDS[@]}"; do
  T0=$SECONDS
  verdict="" by=""
  cp "$TREE/${FILE[$id]}" "$BACKUP"
  PLANTED=${FILE[$id]}
  if ! "${TOOL[@]}" apply "$LIST" "$TREE" "$id" 2>"$LOGS/$id.apply.log"; then
    verdict="not-applied"
    cat "$LOGS/$id.apply.log" >&2
  else
    read -ra ts <<<"${TARGETS[$id]}"
    if ! build "$LOGS/$id.build.log" "${ts[@]}"; then
      verdict="build-error"
    elif run_tests "$LOGS/$id.log" "${REGEX[$id]}"; then
      verdict="survived"
    else
      by=$(tr '\n' ' ' <"$LOGS/failed")
      if [[ -n ${by// /} ]]; then verdict="caught"; else verdict="test-error"; fi
    fi
  fi
  restore
  printf '%s\t%s\t%s\t%s\t%s\n' "$id" "${WHAT[$id]}" "$verdict" "${by% }" "$((SECONDS - T0))" \
    >>"$LOGS/results.tsv"
  printf 'mutation: %-40s %-11s %4d s  %s\n' "$id" "$verdict" "$((SECONDS - T0))" "$by"
done

# 5. The table, named as the benchmarks' results are (bench/common.sh, bench_stamp): UTC date and
#    time, commit, and -2, -3, ... rather than overwrite an earlier run's.
DATE=$(date -u +%Y-%m-%d)
NAME=mutation-$DATE-$(date -u +%H%M)-$COMMIT
n=1 BASE=$NAME
while compgen -G "$OUT/$NAME.*" >/dev/null; do n=$((n + 1)) && NAME=$BASE-$n; done
echo
"${TOOL[@]}" report "$LOGS/results.tsv" "$OUT/$NAME.md" "$OUT/$NAME.json" \
  "date=$DATE" "commit=$COMMIT" "jobs=$JOBS" \
  "machine=$(nproc) cores, $(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2 | xargs)" \
  "seconds=$((SECONDS - T_START))" "list=$(realpath --relative-to="$ROOT" "$LIST")" \
  "command=bash tests/mutation/run.sh${REV:+ --rev $REV}${ONLY:+ --only $ONLY} --jobs $JOBS"
echo "mutation: $OUT/$NAME.md, $OUT/$NAME.json ($((SECONDS - T_START)) s in all)"
if grep -qvP '\tcaught\t' "$LOGS/results.tsv"; then
  echo "mutation: FAILED: not every mutant was caught" >&2
  exit 1
fi
echo "mutation: every mutant was caught"
exit 0
}
