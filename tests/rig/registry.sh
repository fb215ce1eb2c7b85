# tests/rig/registry.sh - the rig's registries as processes: their config, start (until
# they answer), stop; sourced by tests/rig.sh, which defines RIG_DIR, RIG_USER, LOGS,
# REGISTRY_BIN, die and note.
#
# Three registries, each named by its first argument:
#   main    the rig's registry: TLS and htpasswd;
#   mirror  a mirror with its own storage (filled by skopeo copy from main) and its own
#           user and password;
#   mtls    main's storage again, behind a client-certificate check (http.tls.clientcas).

# reg NAME WHAT: one of a registry's files or settings.
reg() {
    local name=$1 sfx=-$1
    [ "$name" != main ] || sfx=
    case $2 in
        config) echo "$RIG_DIR/registry/config$sfx.yml" ;;
        pidfile) echo "$RIG_DIR/registry$sfx.pid" ;;
        portfile) echo "$RIG_DIR/port$sfx" ;;
        storage)
            if [ "$name" = mirror ]; then echo "$RIG_DIR/registry/mirror-data"; else echo "$RIG_DIR/registry/data"; fi ;;
        htpasswd)
            if [ "$name" = mirror ]; then echo "$RIG_DIR/registry/htpasswd-mirror"; else echo "$RIG_DIR/registry/htpasswd"; fi ;;
        login)   # user:password, for the readiness check
            if [ "$name" = mirror ]; then echo "mirror:$(cat "$RIG_DIR/mirror-password")"
            else echo "$RIG_USER:$(cat "$RIG_DIR/password")"; fi ;;
        *) die "reg: no $2" ;;
    esac
}

# registry_pid NAME: prints the PID if that registry of THIS rig is running.
registry_pid() {
    local pid
    pid=$(cat "$(reg "$1" pidfile)" 2>/dev/null) || return 1
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
    # guard against PID reuse: the process must be docker-registry with our config
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "serve $(reg "$1" config)" || return 1
    echo "$pid"
}

stop_registry() {   # stop_registry NAME
    local pid i
    if pid=$(registry_pid "$1"); then
        kill -TERM "$pid" 2>/dev/null || true
        for i in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        if kill -0 "$pid" 2>/dev/null; then
            note "registry $1 ($pid) ignored SIGTERM, sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
        fi
    fi
    rm -f "$(reg "$1" pidfile)"
}

start_registry() {   # start_registry NAME: start it, and wait until it answers
    local name=$1 port login pidfile i code= log=$LOGS/registry.log lines client=()
    port=$(cat "$(reg "$name" portfile)") || die "no port recorded; run 'up' first"
    login=$(reg "$name" login)
    pidfile=$(reg "$name" pidfile)
    [ "$name" != mtls ] || client=(--cert "$RIG_DIR/client/client.cert" --key "$RIG_DIR/client/client.key")
    lines=0; [ -f "$log" ] && lines=$(wc -l <"$log")   # on failure show only this start's lines
    # env -i: distribution reads every REGISTRY_* variable as a config override.
    # setsid: own session, so a ^C in the caller's terminal does not kill it.
    setsid env -i "$REGISTRY_BIN" serve "$(reg "$name" config)" >>"$log" 2>&1 </dev/null &
    echo $! >"$pidfile"
    for i in $(seq 200); do   # ~20 s
        code=$(curl -s -o /dev/null -w '%{http_code}' --cacert "$RIG_DIR/ca/ca.crt" "${client[@]}" \
            -u "$login" "https://127.0.0.1:$port/v2/" 2>/dev/null || true)
        [ "$code" = 200 ] && return 0
        kill -0 "$(cat "$pidfile")" 2>/dev/null || break   # (may not have exec'd yet)
        sleep 0.1
    done
    echo "rig: registry $name did not come up on 127.0.0.1:$port (last HTTP code '$code'); log:" >&2
    tail -n "+$((lines + 1))" "$log" | tail -n 30 >&2
    stop_registry "$name"
    exit 1
}

# free_port: a port below the kernel's ephemeral range (ip_local_port_range), so that
# no socket bound to port 0 and no outgoing connection can be handed it between now and
# the registry's bind, and on which nothing listens now.
free_port() {
    local low p i
    read -r low _ </proc/sys/net/ipv4/ip_local_port_range
    [ "$low" -gt 11000 ] || die "the ephemeral port range starts at $low: no room below it"
    for i in $(seq 100); do
        p=$((10000 + RANDOM % (low - 10000)))
        (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
    done
    die "no free port found"
}

write_config() {   # write_config NAME PORT [CLIENT-CA]
    local name=$1 port=$2 clientcas=
    [ -n "${3:-}" ] && clientcas=$(printf '    clientcas:\n      - %s' "$3")
    echo "$port" >"$(reg "$name" portfile)"
    # No blobdescriptor cache: tests tamper with the storage and must see the result.
    # The access log (one combined-format line per request, in RIG_REGISTRY_LOG)
    # is how tests/worker/ostree.rs sees which blobs a pull really asked for.
    cat >"$(reg "$name" config)" <<YML
version: 0.1
log:
  level: warn
  accesslog:
    disabled: false
storage:
  filesystem:
    rootdirectory: $(reg "$name" storage)
  delete:
    enabled: true
http:
  addr: 127.0.0.1:$port
  secret: $(openssl rand -hex 16)
  tls:
    certificate: $RIG_DIR/ca/server.crt
    key: $RIG_DIR/ca/server.key
$clientcas
auth:
  htpasswd:
    realm: hostpull-rig
    path: $(reg "$name" htpasswd)
YML
}
