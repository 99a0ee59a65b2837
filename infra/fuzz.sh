#!/usr/bin/env bash
# Coverage-guided fuzzing of pricing-core with cargo-fuzz and libFuzzer (docs/fuzzing.md).
#
#   infra/fuzz.sh build              install cargo-fuzz if missing; build the three targets
#   infra/fuzz.sh run TARGET SECS [ARGS]  fuzz TARGET (entry, patch, apply) for SECS
#                                    seconds; ARGS go to libFuzzer
#   infra/fuzz.sh smoke [SECS]       every target for SECS seconds each (default 10)
#   infra/fuzz.sh cmin TARGET [N]    keep in fuzz/corpus/TARGET the seeds and the N (40)
#                                    found inputs that add the most coverage
#
# Works on the stable toolchain: cargo-fuzz passes nightly-only flags (-Zsanitizer,
# coverage options) to rustc, which stable accepts with RUSTC_BOOTSTRAP=1. The targets are
# built with AddressSanitizer and debug assertions (-a: overflow checks and the running-size
# assertion of document::apply_patch). Every run is bounded: -rss_limit_mb and
# -malloc_limit_mb fail it on unbounded memory, -timeout on a slow input.
# Runs at low priority (nice): the machine has 2 cores and others build on it.
set -euo pipefail
script=$(realpath "$0")
cd "$(dirname "$script")/../fuzz"

export RUSTC_BOOTSTRAP=1
# ASan keeps freed memory in a quarantine (256 MB by default), which would count against
# the RSS limit; a small one still finds use-after-free in unsafe dependencies.
export ASAN_OPTIONS="${ASAN_OPTIONS:-quarantine_size_mb=16:detect_leaks=1}"
TARGETS=(entry patch apply)
LIMITS=(-rss_limit_mb=256 -malloc_limit_mb=256 -timeout=10 -max_len=8192 -dict=dict/json.dict)

ensure_cargo_fuzz() {
  if ! cargo fuzz --version >/dev/null 2>&1; then
    nice cargo install cargo-fuzz --locked
  fi
}

build() {
  ensure_cargo_fuzz
  nice cargo fuzz build -a
}

# run TARGET SECONDS: new inputs go to corpus-work/TARGET (not committed), crashes to
# artifacts/TARGET/; the committed corpus is read as a second, read-only directory.
run() {
  local target=$1 seconds=$2
  shift 2
  mkdir -p "corpus-work/$target"
  nice cargo fuzz run -a "$target" "corpus-work/$target" "corpus/$target" -- \
    "${LIMITS[@]}" -max_total_time="$seconds" -print_final_stats=1 "$@"
}

# cmin TARGET [FILES]: the committed corpus stays small and readable: the hand-written seeds
# plus at most FILES (default 40) found inputs, chosen greedily from the committed and the
# work corpus for the most coverage edges not yet covered (libFuzzer's set-cover merge
# control file lists the edges of every input), smaller files first on a tie.
cmin() {
  local target=$1 budget=${2:-40}
  local tmp
  tmp=$(mktemp -d)
  # -set_cover_merge writes every input's whole feature set (-merge=1 only the new ones);
  # without counters a feature is an edge.
  nice "target/x86_64-unknown-linux-gnu/release/$target" -set_cover_merge=1 -use_counters=0 \
    -use_value_profile=0 -merge_control_file="$tmp/control" "${LIMITS[@]}" "$tmp" "corpus/$target" \
    "corpus-work/$target" >"$tmp/merge.log" 2>&1 || {
    tail -n 20 "$tmp/merge.log"
    return 1
  }
  python3 - "$tmp/control" "corpus/$target" "$budget" <<'PY'
import hashlib, os, shutil, sys

control, out, budget = sys.argv[1], sys.argv[2], int(sys.argv[3])
lines = open(control).read().split("\n")
n = int(lines[0])
paths = lines[2 : 2 + n]
edges, sizes = {}, {}
for line in lines[2 + n :]:
    parts = line.split()
    if len(parts) >= 3 and parts[0] == "STARTED":
        sizes[int(parts[1])] = int(parts[2])
    elif parts and parts[0] == "FT":
        edges[int(parts[1])] = set(parts[2:])
seeds = [i for i, p in enumerate(paths) if os.path.basename(p).startswith("seed-")]
covered = set().union(*(edges.get(i, set()) for i in seeds))
chosen = []
candidates = [i for i in edges if i not in seeds]
while len(chosen) < budget:
    best = max(candidates, default=None,
               key=lambda i: (len(edges[i] - covered), -sizes.get(i, 0)))
    if best is None or not edges[best] - covered:
        break
    covered |= edges[best]
    chosen.append(best)
    candidates.remove(best)
data = {i: open(paths[i], "rb").read() for i in chosen}
for name in os.listdir(out):
    if not name.startswith("seed-"):
        os.remove(os.path.join(out, name))
for i in chosen:
    name = hashlib.sha1(data[i]).hexdigest()
    with open(os.path.join(out, name), "wb") as f:
        f.write(data[i])
total = set().union(*edges.values()) if edges else set()
print(f"{out}: {len(seeds)} seeds + {len(chosen)} found inputs cover "
      f"{len(covered)} of {len(total)} edges of the {n} inputs")
PY
  rm -rf "$tmp"
}

case "${1:-}" in
  build) build ;;
  run) build; run "${@:2}" ;;
  smoke)
    build
    for t in "${TARGETS[@]}"; do run "$t" "${2:-10}"; done
    ;;
  cmin) cmin "$2" ;;
  *)
    sed -n '2,10p' "$script"
    exit 2
    ;;
esac
