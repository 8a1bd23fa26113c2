# Sourced by the scripts that start and stop the tests' daemons. A daemon is recorded as
# "NAME PID START" (START: /proc/PID/stat field 22, clock ticks since boot), and a stop signals
# it only while that PID still names the process recorded: a daemon that died early leaves
# its PID free, and where pid_max is small (32768) another process soon gets it.

started_at() {  # started_at PID: when it started; empty once it has ended
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
  stat=${stat##*) }  # the fields after "PID (command) ": field 3 on
  set -- $stat
  [ "$1" = Z ] || echo "${20}"
}

record_pid() {  # record_pid FILE NAME PID
  echo "$2 $3 $(started_at "$3")" >> "$1"
}

still_ours() {  # still_ours PID START: it runs, and it is the process recorded
  [ -n "${2:-}" ] && [ "$(started_at "$1")" = "$2" ]
}
