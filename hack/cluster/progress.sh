# Progress lines for long steps of build-tools.sh and up.sh (sourced, not run).
#
#   step <i> <n> <name> <command...>
#
# prints ">> [i/n] <name>: started" (or ": $STEP_START" when set) on stderr, runs the command, prints a heartbeat
# ">> [i/n] <name>: still running (<s>s)" every $HAMI_GO_HEARTBEAT_S seconds (default 60) while it
# runs, and ">> [i/n] <name>: <what> in <s>s" when it succeeded (<what>: the output of the command
# $STEP_RESULT when set, else $STEP_DONE, default "done"), or ">> [i/n] <name>: FAILED (exit <rc>) after <s>s" and the command's status when it did
# not. The heartbeat is a background subshell of this shell; it is killed when the step ends and by
# the EXIT, INT and TERM traps progress_traps installs, so no ticker outlives the script.
# step_skip <i> <n> <name> <why> prints ">> [i/n] <name>: <why>" for a step that needs no work.

HAMI_GO_HEARTBEAT_S=${HAMI_GO_HEARTBEAT_S:-60}
PROGRESS_TICKER=

progress() { printf '>> %s\n' "$*" >&2; }

# stop_ticker: ends the running heartbeat, if any.
stop_ticker() {
  if [[ -n $PROGRESS_TICKER ]]; then
    kill "$PROGRESS_TICKER" 2>/dev/null || true
    wait "$PROGRESS_TICKER" 2>/dev/null || true
    PROGRESS_TICKER=
  fi
}

# progress_traps: stop the ticker on exit and on SIGINT/SIGTERM (then exit 130/143).
progress_traps() {
  trap stop_ticker EXIT
  trap 'stop_ticker; trap - INT; kill -INT $$' INT
  trap 'stop_ticker; exit 143' TERM
}

step_skip() { progress "[$1/$2] $3: $4"; }

step() {
  local i=$1 n=$2 name=$3 t0=$SECONDS rc=0
  shift 3
  progress "[$i/$n] $name: ${STEP_START:-started}"
  (
    # sleep in the background and wait: a TERM then ends the wait at once and the trap kills the
    # sleep too (a foreground sleep would outlive its killed shell, holding stderr open). A
    # Ctrl-C (SIGINT to the whole process group) takes the same way: a background sleep ignores
    # SIGINT, so without the trap it would outlive the ticker by up to a heartbeat.
    s=
    trap 'kill $s 2>/dev/null; exit 0' TERM INT
    trap - EXIT
    while :; do
      sleep "$HAMI_GO_HEARTBEAT_S" &
      s=$!
      wait "$s"
      progress "[$i/$n] $name: still running ($((SECONDS - t0))s)"
    done
  ) &
  PROGRESS_TICKER=$!
  "$@" || rc=$?
  stop_ticker
  if ((rc != 0)); then
    progress "[$i/$n] $name: FAILED (exit $rc) after $((SECONDS - t0))s"
    return "$rc"
  fi
  local what=${STEP_DONE:-done}
  [[ -z ${STEP_RESULT:-} ]] || what=$($STEP_RESULT)
  progress "[$i/$n] $name: $what in $((SECONDS - t0))s"
}

# progress_tee <log>: copies stdin to <log> (appended) and its ">> " progress lines to stderr.
progress_tee() {
  tee -a "$1" | { grep --line-buffered '^>> ' >&2 || true; }
}
