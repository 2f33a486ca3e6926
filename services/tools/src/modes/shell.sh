# The shell tool's exec (see shell.ts): $1 the shell's directory, $2 this call's id, $3 the timeout in
# milliseconds, the command on stdin. One bash per directory reads commands from the FIFO $D/in, which it
# holds open for reading and writing itself, so it never sees end-of-file between callers. Each call
# writes its command to a file, sends `__tack_run <id>` and waits on its own FIFO done.<id> for the
# exit code; the shell's EXIT trap answers too, so a command that ends the shell is still answered.
D="$1"; id="$2"; limit="$3"
mkdir -p "$D" || exit 90
cat > "$D/cmd.$id"
rm -f "$D/done.$id"; mkfifo "$D/done.$id" || exit 90
# A dead shell nobody reaped (an init that does not wait) is still signalable: look at its state too.
alive() { local s; [ -n "$1" ] && { read -r _ _ s _ < "/proc/$1/stat"; } 2>/dev/null && [ "$s" != Z ]; }
restarted=0
{
  flock 9
  old=$(cat "$D/pid" 2>/dev/null)
  if ! alive "$old"; then
    [ -n "$old" ] && restarted=1
    rm -f "$D/in"; mkfifo "$D/in" || exit 90
    # This call holds the FIFO open (read-write: never blocks) until it is answered: what it writes is
    # kept even before the new shell opens it, and a dead shell cannot block the write.
    exec 5<>"$D/in"
    setsid bash --noprofile --norc -s <>"$D/in" >/dev/null 2>&1 9>&- 5>&- &
    echo $! > "$D/pid"
    # Its only lines of its own: how to run a call, and how to answer one whose command ended the shell.
    printf '%s\n' \
      "__tack_run() { __tack_id=\$1; { eval \"\$(cat '$D'/cmd.\$1)\"; } >'$D'/out.\$1 2>&1 </dev/null; echo \$? >'$D'/done.\$1; __tack_id=; }" \
      "trap 'rc=\$?; [ -n \"\$__tack_id\" ] && echo \"\$rc\" >'$D'/done.\$__tack_id' EXIT" >&5
  else
    exec 5<>"$D/in"
  fi
} 9>"$D/lock"
pid=$(cat "$D/pid")
exec 4<>"$D/done.$id"
printf '__tack_run %s\n' "$id" >&5
ms() { local t=${EPOCHREALTIME/[.,]/}; echo $((t / 1000)); }
end=$(($(ms) + limit)); rc=""; state=done
until read -t 0.2 -u 4 rc; do
  if ! alive "$pid"; then read -t 0.2 -u 4 rc || state=died; break; fi
  if [ "$(ms)" -ge "$end" ]; then state=timeout; kill -9 -- "-$pid" 2>/dev/null; break; fi
done
size=$(stat -c %s "$D/out.$id" 2>/dev/null || echo 0)
head -c 400000 "$D/out.$id" 2>/dev/null
rm -f "$D/cmd.$id" "$D/out.$id" "$D/done.$id"
# The last line is for shell.ts: how the call ended, the exit code, the output's size, whether the shell was restarted.
printf '\n__tack_shell %s %s %s %s\n' "$state" "${rc:-none}" "$size" "$restarted"
