#!/usr/bin/env bash
# Plans every shipped stack (dev, prod and the multi-team examples) into OUT and prints one sha256 per
# artifact: run it before and after a refactor, and diff the two lists (they must be identical).
# Usage: bench/artifact-digests.sh OUT [PYTHON_CMD...]
set -uo pipefail
out=$(realpath -m "$1"); shift
cmd=("$@"); [ ${#cmd[@]} -gt 0 ] || cmd=(amlgpu)
src=$(pwd)
rm -rf "$out"; mkdir -p "$out/work"
cp -r "$src"/. "$out/work/" 2>/dev/null; rm -rf "$out/work/build" "$out/work/.git"
cp "$src"/examples/multi-team/Pulumi.*.yaml "$out/work/"
cp "$src"/examples/multi-team/policy-config.json "$out/work/policies/config.json"
cd "$out/work"
export TZ=UTC LC_ALL=C.UTF-8
RUN_CWD="$out/work" "${cmd[@]}" plan --all --out "$out/plans" >"$out/plan.log" 2>&1; echo "plan --all exit $?" >"$out/exit"
cd "$out/plans" && find . -type f | LC_ALL=C sort | xargs sha256sum
