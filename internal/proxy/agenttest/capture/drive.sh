#!/usr/bin/env bash
# drive.sh AGENT RAWDIR: runs one agent CLI through a scripted session against the capture
# server, saving every request it sends into RAWDIR. AGENT: claude, codex, gemini, opencode,
# or gemini-masking (Gemini CLI with big tool outputs, to see its tool output masking).
# The CLIs come from ../js/node_modules (npm ci there first). Nothing leaves the machine:
# HTTPS_PROXY/HTTP_PROXY point at the capture server's listener that refuses them all.
set -u
agent=$1 raw=$(realpath -m "$2")
here=$(cd "$(dirname "$0")" && pwd)
bin=$here/../js/node_modules/.bin
run=$(mktemp -d /tmp/agentcap-$agent.XXXX)
mkdir -p "$raw" "$run/home" "$run/work"
(cd "$here" && go build -o "$run/capture" .) || exit 1
"$run/capture" -out "$raw" -addrfile "$run/addrs" 2>"$run/capture.log" &
cap=$!
trap 'kill $cap 2>/dev/null' EXIT
for _ in $(seq 50); do [ -s "$run/addrs" ] && break; sleep 0.1; done
model=$(sed -n 's/^model=//p' "$run/addrs") proxy=$(sed -n 's/^proxy=//p' "$run/addrs")
echo "run=$run model=$model proxy=$proxy"

ctl() { curl -s -X POST "$model/_ctl" -d "$1" >/dev/null; }
export HOME=$run/home HTTPS_PROXY=$proxy HTTP_PROXY=$proxy https_proxy=$proxy http_proxy=$proxy \
  NO_PROXY=127.0.0.1,localhost no_proxy=127.0.0.1,localhost
cd "$run/work"
step() { # step LABEL CMD...: runs one CLI invocation with the label set, output to run/LABEL.out
  local label=$1; shift
  ctl "{\"label\":\"$label\"}"
  echo "== $label: $*"
  timeout 180 "$@" >"$run/$label.out" 2>"$run/$label.err" </dev/null
  echo "   exit $? $(head -c 300 "$run/$label.out" | tr '\n' ' ')"
}
P1="Remember this fact: FACT-ALPHA-1. Then run echo hi."
P2="Second prompt: run echo hi again."
P3="Third prompt: run echo hi once more."
P4="Fourth prompt: run echo hi and tell me what it printed."
P5="After compaction: what was the fact from my first prompt? Run echo hi."
P6="Sixth prompt: run echo hi."
P7="Seventh prompt: run echo hi."

case $agent in
claude)
  export ANTHROPIC_BASE_URL=$model ANTHROPIC_API_KEY=sk-test-capture CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 \
    DISABLE_TELEMETRY=1 IS_SANDBOX=1 CLAUDE_CODE_MAX_RETRIES=2 DISABLE_AUTOUPDATER=1
  c=("$bin/claude" --output-format json --dangerously-skip-permissions)
  step p1 "${c[@]}" -p "$P1"
  ctl '{"fail429":true}'
  step p2 "${c[@]}" -p "$P2" --continue
  step p3 "${c[@]}" -p "$P3" --continue
  step p4 "${c[@]}" -p "$P4" --continue
  step compact "${c[@]}" -p "/compact" --continue
  step p5 "${c[@]}" -p "$P5" --continue
  ctl "{\"usage\":${CLAUDE_HUGE:-990000}}"
  step p6-huge-usage "${c[@]}" -p "$P6" --continue
  step p7 "${c[@]}" -p "$P7" --continue
  ;;
codex)
  mkdir -p "$HOME/.codex"
  cat >"$HOME/.codex/config.toml" <<TOML
model = "${CODEX_MODEL:-gpt-5.1-codex}"
model_provider = "local"
approval_policy = "never"
sandbox_mode = "danger-full-access"
${CODEX_EXTRA:-}

[model_providers.local]
name = "local"
base_url = "$model/v1"
env_key = "OPENAI_API_KEY"
wire_api = "responses"
request_max_retries = 2
stream_max_retries = 2
TOML
  export OPENAI_API_KEY=sk-test-capture
  step p1 "$bin/codex" exec --skip-git-repo-check "$P1"
  ctl '{"fail429":true}'
  step p2 "$bin/codex" exec --skip-git-repo-check resume --last "$P2"
  step p3 "$bin/codex" exec --skip-git-repo-check resume --last "$P3"
  ctl "{\"usage\":${CODEX_HUGE:-1000000}}"
  step p4-huge-usage "$bin/codex" exec --skip-git-repo-check resume --last "$P4"
  step p5 "$bin/codex" exec --skip-git-repo-check resume --last "$P5"
  ;;
gemini|gemini-masking)
  mkdir -p "$HOME/.gemini"
  cat >"$HOME/.gemini/settings.json" <<JSON
{"security": {"auth": {"selectedType": "gemini-api-key"}},
 "privacy": {"usageStatisticsEnabled": false},
 "telemetry": {"enabled": false},
 "general": {"disableAutoUpdate": true, "disableUpdateNag": true},
 "contextManagement": {"tools": {"outputMasking": {"protectionThresholdTokens": ${GEMINI_MASK_PROTECT:-50}, "minPrunableThresholdTokens": ${GEMINI_MASK_PRUNABLE:-30}}}}}
JSON
  export GEMINI_API_KEY=test-capture-key GOOGLE_GEMINI_BASE_URL=$model GEMINI_CLI_TRUST_WORKSPACE=true
  g=("$bin/gemini" --approval-mode yolo --output-format json)
  if [ "$agent" = gemini-masking ]; then
    # Tool output masking: older tool outputs past 50k estimated tokens, with 30k more to
    # prune, are replaced by <tool_output_masked> (this version does not read thresholds
    # from settings.json, so the outputs are made big).
    # The shell tool keeps 40,000 characters of an output (~10k estimated tokens), and a
    # resumed session holds each old output twice: six prompts are enough.
    ctl '{"command":"seq 100000 135000"}'
    step p1 "${g[@]}" -p "$P1"
    for i in 2 3 4 5 6; do step p$i "${g[@]}" --resume latest -p "Prompt $i: run the command again."; done
    ctl '{"command":"echo hi"}'
    step p7 "${g[@]}" --resume latest -p "Prompt 7: run echo hi."
    step p8 "${g[@]}" --resume latest -p "Prompt 8: run echo hi."
    break_after=1
  fi
  [ -n "${break_after:-}" ] || {
  step p1 "${g[@]}" -p "$P1"
  ctl '{"fail429":true,"fail429Kind":"gemini-stream"}'
  step p2 "${g[@]}" --resume latest -p "$P2"
  step p3 "${g[@]}" --resume latest -p "$P3"
  step compress-command "${g[@]}" --resume latest -p "/compress"
  ctl "{\"usage\":${GEMINI_HUGE:-1000000},\"usageOnTool\":true}"
  step p4-huge-usage "${g[@]}" --resume latest -p "$P4"
  step p5 "${g[@]}" --resume latest -p "$P5"
  }
  ;;
opencode)
  cat >opencode.json <<JSON
{
  "\$schema": "https://opencode.ai/config.json",
  "autoupdate": false,
  "share": "disabled",
  "model": "local/test-model",
  "small_model": "local/test-model",
  "provider": {
    "local": {
      "npm": "@ai-sdk/openai-compatible",
      "name": "Local capture server",
      "options": {"baseURL": "$model/v1", "apiKey": "sk-test-capture"},
      "models": {"test-model": {"name": "Test model", "tool_call": true, "limit": {"context": ${OPENCODE_CONTEXT:-100000}, "output": 8000}}}
    }
  },
  "permission": {"bash": "allow", "edit": "allow", "webfetch": "deny"}
}
JSON
  export OPENCODE_DISABLE_AUTOUPDATE=1 OPENCODE_DISABLE_MODELS_FETCH=1
  o=("$bin/opencode" run --print-logs)
  step p1 "${o[@]}" "$P1"
  ctl '{"fail429":true}'
  step p2 "${o[@]}" --continue "$P2"
  step p3 "${o[@]}" --continue "$P3"
  ctl "{\"usage\":${OPENCODE_HUGE:-99000}}"
  step p4-huge-usage "${o[@]}" --continue "$P4"
  step p5 "${o[@]}" --continue "$P5"
  ;;
*) echo "unknown agent $agent"; exit 2 ;;
esac
echo "== requests"; ls "$raw"
echo "== refused proxy requests"; grep -o 'proxy: .*' "$run/capture.log" | sort | uniq -c
