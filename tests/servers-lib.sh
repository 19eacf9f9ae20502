# Shell helpers shared by with-servers.sh and with-topology.sh (sourced;
# the sourcing script defines log and die).
# shellcheck shell=bash

# Run a command as postgres from a directory postgres can read (pg_ctl and psql
# complain when the current directory is, say, /root).
as_pg() { runuser -u postgres -- env -C / "$@"; }

# Is PID alive and is its command line mentioning NEEDLE (guards against reuse
# of a stale pid)?
pid_matches() {
    local pid=$1 needle=$2 cmdline
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    cmdline=$(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline") || return 1
    [[ "$cmdline" == *"$needle"* ]]
}

# Wait up to $2 tenths of a second for process $1 to disappear.
wait_gone() {
    local pid=$1 n=$2
    while [ "$n" -gt 0 ] && kill -0 "$pid" 2>/dev/null; do
        sleep 0.1
        n=$((n - 1))
    done
    ! kill -0 "$pid" 2>/dev/null
}

# Children of a process (by parent pid), from /proc.
children_of() {
    local parent=$1 stat pid rest
    for stat in /proc/[0-9]*/stat; do
        stat=$(cat "$stat" 2>/dev/null) || continue
        pid=${stat%% *}
        rest=${stat##*) }          # "S PPID ..." after the "(comm)" field
        rest=${rest#* }
        [ "${rest%% *}" = "$parent" ] && printf '%s\n' "$pid"
    done
    return 0
}

# Print a free TCP port on 127.0.0.1: random, below the kernel's ephemeral
# range, not currently listening (asked via ss) and not in the arguments.
free_port() {
    local lo hi p q tries=0 taken
    read -r lo _ </proc/sys/net/ipv4/ip_local_port_range
    if [ "$lo" -gt 20000 ]; then
        hi=$((lo - 1)) lo=20000      # usually 20000..32767
    else
        hi=60999 lo=50000
    fi
    while [ "$tries" -lt 200 ]; do
        tries=$((tries + 1))
        p=$((lo + (RANDOM * 32768 + RANDOM) % (hi - lo + 1)))
        taken=0
        for q in "$@"; do [ "$q" = "$p" ] && taken=1; done
        [ "$taken" = 0 ] || continue
        if [ -z "$(ss -Htln "sport = :$p" 2>/dev/null)" ]; then
            printf '%s\n' "$p"
            return 0
        fi
    done
    die "no free port found"
}

random_password() {
    local pw=""
    while [ "${#pw}" -lt 24 ]; do
        pw+=$(head -c 48 /dev/urandom | base64 | tr -dc 'A-Za-z0-9')
    done
    printf '%s\n' "${pw:0:24}"
}

