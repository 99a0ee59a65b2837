#!/usr/bin/env bash
# Runs the market scenario suite (PRICING.md): every infra/scenarios/*.json (or the files
# given) through
#   cargo run --release -p standalone -- simulate market --scenario F --json --models M
# and prints one table: each model's revenue as a percentage of the optimal dynamic policy,
# and the best fixed prices' for comparison.
#
# Usage: infra/scenarios/run.sh [--past-instances N] [--runs N] [--models LIST] [FILE...]
#   --past-instances N  overrides the files' pastInstances (e.g. 0: no history to learn from)
#   --runs N            overrides the files' runs
#   --models LIST       models to compare (default: default,pace,fixed)
# Needs jq.
set -euo pipefail
cd "$(dirname "$0")/../.."

models=default,pace,fixed
extra=()
files=()
while [ $# -gt 0 ]; do
    case "$1" in
        --past-instances | --runs)
            [ $# -ge 2 ] || { echo "$1 needs a value" >&2; exit 2; }
            extra+=("$1" "$2")
            shift 2
            ;;
        --models)
            [ $# -ge 2 ] || { echo "--models needs a value" >&2; exit 2; }
            models="$2"
            shift 2
            ;;
        -h | --help)
            sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
            exit 0
            ;;
        *)
            files+=("$1")
            shift
            ;;
    esac
done
if [ ${#files[@]} -eq 0 ]; then
    files=(infra/scenarios/*.json)
fi
command -v jq > /dev/null || { echo "run.sh needs jq" >&2; exit 1; }

cargo build --release -q -p standalone

{
    printf 'scenario'
    IFS=',' read -ra labels <<< "$models"
    for label in "${labels[@]}"; do printf '\t%s %%' "$label"; done
    printf '\tbest fixed %%\n'
    for file in "${files[@]}"; do
        report=$(cargo run --release -q -p standalone -- simulate market --quiet \
            --scenario "$file" --json --models "$models" ${extra[@]+"${extra[@]}"})
        jq -r '[.scenario]
            + [.models[].percentOfOptimal | tostring]
            + [(.bestFixed.revenue * 1000 / .optimal.revenue | round / 10 | tostring)]
            | @tsv' <<< "$report"
    done
} | column -t -s $'\t'
