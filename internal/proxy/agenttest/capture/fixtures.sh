#!/usr/bin/env bash
# fixtures.sh: runs the four agents (and Gemini CLI's masking scenario) through drive.sh and
# writes the trimmed requests to ../testdata/<agent>/. The untrimmed ones stay in $RAW
# (default /tmp/agenttest-raw). Needs ../js/node_modules (npm ci there) and curl.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
raw=${RAW:-/tmp/agenttest-raw}
out=$here/../testdata
agents=${*:-claude codex gemini gemini-masking opencode}
mkdir -p "$raw" && (cd "$here" && go build -o "$raw/capture" .)
for a in $agents; do
  rm -rf "${out:?}/$a"
  if [ -z "${TRIM_ONLY:-}" ]; then # TRIM_ONLY=1 remakes the fixtures from $RAW
    rm -rf "${raw:?}/$a"
    "$here/drive.sh" "$a" "$raw/$a" >"$raw/$a.log" 2>&1 || { cat "$raw/$a.log"; exit 1; }
  fi
  "$raw/capture" -trim -maxstr 2000 -maxdesc 120 "$raw/$a" "$out/$a"
done
# The masking scenario's requests are big and alike: keep the two before the first one that
# holds <tool_output_masked>, that one and the next, and the last two.
if [ -d "$out/gemini-masking" ]; then
  (
    cd "$out/gemini-masking"
    mapfile -t files < <(ls)
    first=$(grep -l tool_output_masked "${files[@]}" | head -1)
    keep=()
    for i in "${!files[@]}"; do
      [ "${files[$i]}" = "$first" ] && keep+=("${files[@]:$((i - 2)):4}")
    done
    keep+=("${files[@]: -2}")
    for f in "${files[@]}"; do
      printf '%s\n' "${keep[@]}" | grep -qx "$f" || rm "$f"
    done
  )
fi
du -s --apparent-size --block-size=1K "$out"/*
