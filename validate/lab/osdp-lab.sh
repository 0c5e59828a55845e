#!/usr/bin/env bash
# osdp-lab.sh — a communication-bound lab of N "nodes" x R ranks on one machine, for osdp calibrate
# and osdp validate over shaped links (see validate/lab/README.md).
#
#   osdp-lab.sh up   --nodes N --ranks-per-node R --rate RATE [--burst B] [--latency L] [--tcp-cc CC]
#                    [--mtu M] [--name NAME] [--subnet A.B.C.0/24] [--cluster-out FILE] [--topology pair|switch]
#   osdp-lab.sh down [--name NAME]              remove everything the lab made (safe to repeat)
#   osdp-lab.sh run  [up options] -- COMMAND... up, COMMAND inside node 0, down (also on Ctrl-C/error)
#   osdp-lab.sh exec [--name NAME] [--node I] -- COMMAND...   COMMAND inside node I of a lab that is up
#   osdp-lab.sh mpirun-args [--name NAME]       the mpirun arguments that start ranks in the lab
#   osdp-lab.sh status [--name NAME]
#
# Each node is a network namespace NAME-nI; each command run in it gets a UTS namespace with the
# hostname NAME-nI and the node's CPU set. Nodes are joined by veth pairs shaped with tbf on both
# ends: directly for 2 nodes (topology "pair"), through a bridge in a namespace NAME-sw otherwise
# ("switch"). Addresses come from a private /24 and exist only inside the lab's namespaces; the
# host's own interfaces and namespace are never touched. What the lab made is recorded under
# $OSDP_LAB_STATE_ROOT/NAME (default /run/osdp-lab/NAME), and `down` removes exactly that.
set -euo pipefail

PROG=${0##*/}
STATE_ROOT=${OSDP_LAB_STATE_ROOT:-/run/osdp-lab}

die() {
  echo "$PROG: $*" >&2
  exit 2
}
note() { echo "$PROG: $*" >&2; }

usage() {
  sed -n '4,11p' "$0" | sed 's/^# \{0,1\}//'
}

# ---------------------------------------------------------------------------------------------
# Options

NAME=osdplab
NODES=
RPN=
RATE=
BURST=32kb
TCP_CC=
MTU=9000
LATENCY=50ms
SUBNET=10.213.0.0/24
CLUSTER_OUT=
TOPOLOGY=
NODE=0
HOSTSEL=
CMD=()
OSDP_BIN=${OSDP_BIN:-osdp}

parse_options() {
  while (($#)); do
    case $1 in
      --nodes) NODES=${2:?--nodes needs a value}; shift 2 ;;
      --ranks-per-node) RPN=${2:?--ranks-per-node needs a value}; shift 2 ;;
      --rate) RATE=${2:?--rate needs a value}; shift 2 ;;
      --burst) BURST=${2:?--burst needs a value}; shift 2 ;;
      --latency) LATENCY=${2:?--latency needs a value}; shift 2 ;;
      --tcp-cc) TCP_CC=${2:?--tcp-cc needs a value}; shift 2 ;;
      --mtu) MTU=${2:?--mtu needs a value}; shift 2 ;;
      --name) NAME=${2:?--name needs a value}; shift 2 ;;
      --subnet) SUBNET=${2:?--subnet needs a value}; shift 2 ;;
      --cluster-out) CLUSTER_OUT=${2:?--cluster-out needs a value}; shift 2 ;;
      --topology) TOPOLOGY=${2:?--topology needs a value}; shift 2 ;;
      --node) NODE=${2:?--node needs a value}; shift 2 ;;
      --host) HOSTSEL=${2:?--host needs a value}; shift 2 ;;
      --) shift; CMD=("$@"); return ;;
      -h | --help) usage; exit 0 ;;
      *) die "unknown option \"$1\" (try $PROG --help)" ;;
    esac
  done
}

check_name() {
  # Namespace and interface names derive from it: NAME-sw, NAME-n12 must stay short and plain.
  [[ $NAME =~ ^[a-z][a-z0-9]{0,9}$ ]] ||
    die "--name \"$NAME\": expected a lowercase letter then up to 9 lowercase letters or digits"
  STATE=$STATE_ROOT/$NAME
}

# Prints a tc size (b, k or kb = 1024 b, m or mb = 1024 kb) in bytes.
size_bytes() {
  [[ $1 =~ ^([0-9]+)(b|kb|k|mb|m)?$ ]] || return 1
  case ${BASH_REMATCH[2]} in
    kb | k) echo $((BASH_REMATCH[1] * 1024)) ;;
    mb | m) echo $((BASH_REMATCH[1] * 1024 * 1024)) ;;
    *) echo "${BASH_REMATCH[1]}" ;;
  esac
}

# Prints the rate in bit/s for tc's bit rates (bit, kbit, mbit, gbit, tbit; decimal, as tc reads them).
rate_bits() {
  local r=$1
  [[ $r =~ ^([0-9]+(\.[0-9]+)?)(bit|kbit|mbit|gbit|tbit)$ ]] ||
    die "--rate \"$r\": expected a number and bit, kbit, mbit, gbit or tbit (e.g. 1gbit)"
  local mult
  case ${BASH_REMATCH[3]} in
    bit) mult=1 ;; kbit) mult=1e3 ;; mbit) mult=1e6 ;; gbit) mult=1e9 ;; tbit) mult=1e12 ;;
  esac
  awk -v v="${BASH_REMATCH[1]}" -v m="$mult" 'BEGIN { printf "%.0f\n", v * m }'
}

check_up_options() {
  if ! [[ $NODES =~ ^[0-9]+$ ]] || ((NODES < 2 || NODES > 64)); then
    die "--nodes: expected 2 to 64 (got \"$NODES\")"
  fi
  if ! [[ $RPN =~ ^[0-9]+$ ]] || ((RPN < 1 || RPN > 64)); then
    die "--ranks-per-node: expected 1 to 64 (got \"$RPN\")"
  fi
  [[ -n $RATE ]] || die "--rate is required (e.g. --rate 1gbit)"
  RATE_BITS=$(rate_bits "$RATE")
  ((RATE_BITS >= 8000)) || die "--rate $RATE: too slow (at least 8kbit)"
  [[ $BURST =~ ^[0-9]+(b|kb|k|mb|m)?$ ]] || die "--burst \"$BURST\": expected e.g. 32kb (tc's sizes: b, kb, mb)"
  [[ $LATENCY =~ ^[0-9]+(us|ms|s)$ ]] || die "--latency \"$LATENCY\": expected e.g. 50ms"
  if ! [[ $MTU =~ ^[0-9]+$ ]] || ((MTU < 1280 || MTU > 65535)); then
    die "--mtu: expected 1280 to 65535 (got \"$MTU\")"
  fi
  # tbf drops a frame larger than its bucket: the burst must hold one frame and its header.
  local burst_bytes
  burst_bytes=$(size_bytes "$BURST")
  ((burst_bytes >= MTU + 14)) || die "--burst $BURST is smaller than one frame (--mtu $MTU): tbf would drop every full frame"
  # TCP congestion control inside the nodes: cubic (Linux's usual) where a namespace may choose it,
  # else reno. Not bbr: its pacing follows a bandwidth estimate that bursty collectives keep too
  # low, and a step's collectives then ran at half the link rate in some steps and not in others.
  local allowed
  allowed=$(sysctl -n net.ipv4.tcp_allowed_congestion_control 2>/dev/null || true)
  if [[ -z $TCP_CC ]]; then
    TCP_CC=reno
    [[ " $allowed " == *" cubic "* ]] && TCP_CC=cubic
  fi
  [[ " $allowed " == *" $TCP_CC "* ]] ||
    die "--tcp-cc \"$TCP_CC\": a network namespace may only choose one of: ${allowed:-(none listed)}"
  [[ $SUBNET =~ ^([0-9]+)\.([0-9]+)\.([0-9]+)\.0/24$ ]] || die "--subnet \"$SUBNET\": expected A.B.C.0/24"
  local a=${BASH_REMATCH[1]} b=${BASH_REMATCH[2]} c=${BASH_REMATCH[3]}
  ((b <= 255 && c <= 255)) || die "--subnet $SUBNET: not an IPv4 network"
  if ! ((a == 10 || (a == 172 && b >= 16 && b <= 31) || (a == 192 && b == 168))); then
    die "--subnet $SUBNET: not in a private range (10/8, 172.16/12, 192.168/16)"
  fi
  PREFIX=$a.$b.$c
  [[ -z $TOPOLOGY ]] && { ((NODES == 2)) && TOPOLOGY=pair || TOPOLOGY=switch; }
  case $TOPOLOGY in
    pair) ((NODES == 2)) || die "--topology pair joins exactly 2 nodes; use switch for $NODES" ;;
    switch) ;;
    *) die "--topology \"$TOPOLOGY\": expected pair or switch" ;;
  esac
}

# CAP_NET_ADMIN (bit 12) and CAP_SYS_ADMIN (bit 21, for namespaces and hostnames) in this process.
check_caps() {
  local eff
  eff=$(awk '/^CapEff:/ { print $2 }' /proc/self/status)
  local v=$((16#$eff))
  ((v & (1 << 12))) ||
    die "needs CAP_NET_ADMIN (network namespaces, veth, tc): run it as root or with that capability"
  ((v & (1 << 21))) || die "needs CAP_SYS_ADMIN (mount and UTS namespaces): run it as root"
  for tool in ip tc unshare taskset nsenter; do
    command -v "$tool" >/dev/null || die "needs \"$tool\" on PATH"
  done
}

ns_exists() { [[ -e /run/netns/$1 ]]; }

# ---------------------------------------------------------------------------------------------
# up

# Cpu list of node i: R consecutive CPUs of those this process may use, wrapping around.
node_cpus() {
  local i=$1 k list=()
  for ((k = 0; k < RPN; k++)); do list+=("${CPUS[$(((i * RPN + k) % ${#CPUS[@]}))]}"); done
  printf '%s\n' "${list[@]}" | sort -nu | paste -sd, -
}

# Records one thing made, before it is made, so an interrupted `up` is still undone in full.
record() { echo "$*" >>"$STATE/made"; }

do_up() {
  check_name
  check_up_options
  check_caps
  if [[ -e $STATE ]]; then
    die "a lab named \"$NAME\" exists ($STATE); remove it with: $PROG down --name $NAME"
  fi
  local i
  for ((i = 0; i < NODES; i++)); do
    ! ns_exists "$NAME-n$i" || die "network namespace $NAME-n$i exists but is not this lab's; refusing"
  done
  ! ns_exists "$NAME-sw" || die "network namespace $NAME-sw exists but is not this lab's; refusing"

  mkdir -p "$STATE_ROOT"
  mkdir "$STATE" || die "cannot create $STATE"
  UP_OK=0
  trap 'if ((UP_OK == 0)); then note "up failed; removing what it made"; do_down_quiet; fi' EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM

  # CPUs this process may run on.
  mapfile -t CPUS < <(taskset -cp $$ | sed 's/.*: //' | tr ',' '\n' | awk -F- '{ if (NF == 2) for (c = $1; c <= $2; c++) print c; else print $1 }')
  if ((NODES * RPN > ${#CPUS[@]})); then
    note "warning: $((NODES * RPN)) ranks on ${#CPUS[@]} CPUs; nodes share CPUs"
  fi

  {
    echo "NAME=$NAME"
    echo "NODES=$NODES"
    echo "RPN=$RPN"
    echo "RATE=$RATE"
    echo "RATE_BITS=$RATE_BITS"
    echo "BURST=$BURST"
    echo "LATENCY=$LATENCY"
    echo "TCP_CC=$TCP_CC"
    echo "MTU=$MTU"
    echo "SUBNET=$SUBNET"
    echo "TOPOLOGY=$TOPOLOGY"
  } >"$STATE/config"

  # Namespaces, each with /etc/netns/NS/hosts (ip netns exec mounts it over /etc/hosts in there).
  local hosts="127.0.0.1 localhost"$'\n'
  for ((i = 0; i < NODES; i++)); do hosts+="$PREFIX.$((i + 1)) $NAME-n$i"$'\n'; done
  local all_ns=()
  for ((i = 0; i < NODES; i++)); do all_ns+=("$NAME-n$i"); done
  [[ $TOPOLOGY == switch ]] && all_ns+=("$NAME-sw")
  [[ -d /etc/netns ]] || { record etcnetns; mkdir /etc/netns; }
  local ns
  for ns in "${all_ns[@]}"; do
    record netns "$ns"
    ip netns add "$ns"
    record etcdir "/etc/netns/$ns"
    mkdir "/etc/netns/$ns"
    printf '%s' "$hosts" >"/etc/netns/$ns/hosts"
    ip -n "$ns" link set lo up
    ip netns exec "$ns" sysctl -q -w net.ipv4.tcp_congestion_control="$TCP_CC" >/dev/null
  done

  # Links. Every interface is created inside a lab namespace (ip -n NS link add ... peer ... netns),
  # never in the host's. tbf on both ends shapes both directions.
  local shape=(tbf rate "$RATE" burst "$BURST" latency "$LATENCY")
  if [[ $TOPOLOGY == pair ]]; then
    ip -n "$NAME-n0" link add lab0 type veth peer name lab0 netns "$NAME-n1"
    for i in 0 1; do
      ip -n "$NAME-n$i" addr add "$PREFIX.$((i + 1))/24" dev lab0
      ip -n "$NAME-n$i" link set lab0 mtu "$MTU" up
      tc -n "$NAME-n$i" qdisc replace dev lab0 root "${shape[@]}"
    done
  else
    ip -n "$NAME-sw" link add br0 type bridge
    ip -n "$NAME-sw" link set br0 up
    for ((i = 0; i < NODES; i++)); do
      ip -n "$NAME-sw" link add "p$i" type veth peer name lab0 netns "$NAME-n$i"
      ip -n "$NAME-sw" link set "p$i" master br0
      ip -n "$NAME-sw" link set "p$i" mtu "$MTU" up
      tc -n "$NAME-sw" qdisc replace dev "p$i" root "${shape[@]}"
      ip -n "$NAME-n$i" addr add "$PREFIX.$((i + 1))/24" dev lab0
      ip -n "$NAME-n$i" link set lab0 mtu "$MTU" up
      tc -n "$NAME-n$i" qdisc replace dev lab0 root "${shape[@]}"
    done
  fi

  # Per node: CPU set; the hostfile; the rsh agent that starts a node's Open MPI daemon in it.
  : >"$STATE/hostfile"
  : >"$STATE/nodes"
  for ((i = 0; i < NODES; i++)); do
    echo "$NAME-n$i slots=$RPN" >>"$STATE/hostfile"
    echo "$NAME-n$i $NAME-n$i $(node_cpus "$i") $PREFIX.$((i + 1))" >>"$STATE/nodes"
  done
  write_agent
  write_cluster
  if [[ -n $CLUSTER_OUT ]]; then
    cp "$STATE/cluster.json" "$CLUSTER_OUT"
  fi

  # Node 0 reaches every other node through the links: a TCP connection to a closed port is
  # refused at once by a reachable node (no ping needed).
  for ((i = 1; i < NODES; i++)); do
    local out
    out=$(ip netns exec "$NAME-n0" timeout 5 bash -c "exec 3<>/dev/tcp/$PREFIX.$((i + 1))/9" 2>&1) || true
    [[ $out == *refused* ]] || die "node 0 cannot reach node $i ($PREFIX.$((i + 1))): ${out:-timed out}"
  done
  # shellcheck disable=SC2034  # read by the EXIT trap
  UP_OK=1
  trap - EXIT INT TERM
  print_summary
}

write_agent() {
  # Open MPI calls it as: AGENT [options] HOST COMMAND... and expects COMMAND to be run by a shell
  # on HOST, as ssh would. Environment (PATH, LD_LIBRARY_PATH, OMPI_*) passes through.
  cat >"$STATE/rsh-agent" <<EOF
#!/usr/bin/env bash
# rsh agent of the osdp lab "$NAME": starts a command in a node's namespaces.
set -eu
while [[ \$# -gt 0 && \$1 == -* ]]; do shift; done
host=\${1:?host expected}; shift
exec "$(realpath "$0")" exec --name "$NAME" --host "\$host" -- sh -c "\$*"
EOF
  chmod 755 "$STATE/rsh-agent"
}

write_cluster() {
  local bw_mbs
  bw_mbs=$(awk -v b="$RATE_BITS" 'BEGIN { printf "%.6g", b / 8 / 1e6 }')
  cat >"$STATE/cluster.json" <<EOF
{
  "schema_version": 1,
  "name": "lab-$NAME-${NODES}x${RPN}",
  "description": "osdp lab \"$NAME\": $NODES network namespaces on one machine x $RPN MPI ranks each (Eigen fp32, one thread per rank), shared memory inside a node, Open MPI TCP over veth links shaped with tbf at $RATE between nodes",
  "source": "Device and intra-node figures are those of cpu-2 (rough, for one machine's CPU cores); the inter-node bandwidth is the tbf rate $RATE ($bw_mbs MB/s), the alpha a rough figure for TCP over veth. Run osdp calibrate inside the lab for real figures.",
  "nodes": $NODES,
  "devices_per_node": $RPN,
  "device": {
    "name": "CPU rank (Eigen, 1 thread)",
    "memory": "4GiB",
    "reserve": "0B",
    "fp32_flops": "90GFLOP/s",
    "bf16_flops": "90GFLOP/s",
    "gemm_efficiency": 1.0,
    "gemm_half_efficiency_dim": 16,
    "memory_bandwidth": "10GB/s",
    "kernel_overhead": "2us"
  },
  "links": {
    "intra": {
      "alpha": "5us",
      "bandwidth": "1.5GB/s"
    },
    "inter": {
      "alpha": "50us",
      "bandwidth": "${bw_mbs}MB/s"
    }
  },
  "overlap": {
    "enabled": true,
    "interference": 1.5
  }
}
EOF
}

mpirun_args() {
  local args="--hostfile $STATE/hostfile --mca plm_rsh_agent $STATE/rsh-agent --mca plm_rsh_no_tree_spawn 1"
  args+=" --mca btl tcp,vader,self --mca btl_tcp_if_include $SUBNET --mca oob_tcp_if_include $SUBNET"
  # Eager sends up to 32 MiB: with Open MPI's default rendezvous, a collective's handshake rides the
  # TCP stream behind the previous collective's tail, so an all-gather issued right after a
  # reduce-scatter took 2-4x its time alone (docs/validation.md, "The lab").
  args+=" --mca btl_tcp_eager_limit 33554432 --mca btl_tcp_rndv_eager_limit 33554432"
  args+=" --mca btl_tcp_max_send_size 33554432"
  args+=" --bind-to none"
  ((EUID == 0)) && args+=" --allow-run-as-root"
  echo "$args"
}

print_summary() {
  local np=$((NODES * RPN)) me args
  me=$(realpath "$0")
  args=$(mpirun_args)
  cat <<EOF
osdp lab "$NAME" is up: $NODES nodes x $RPN ranks, $TOPOLOGY topology, links shaped at $RATE (burst $BURST)
  state:    $STATE
  cluster:  ${CLUSTER_OUT:-$STATE/cluster.json}
  hostfile: $STATE/hostfile
Nodes (namespace, hostname, CPUs, address):
$(sed 's/^/  /' "$STATE/nodes")
Run osdp inside the lab (mpirun starts in node 0; the rsh agent starts the other nodes):
  $me exec --name $NAME -- $OSDP_BIN calibrate --backend mpi -np $np --mpirun-args "$args" --out lab-calibration.json
  $me exec --name $NAME -- $OSDP_BIN plan --model val-4x384 --cluster ${CLUSTER_OUT:-$STATE/cluster.json} --batch 1 --out lab-plan.json
  $me exec --name $NAME -- $OSDP_BIN validate --plan lab-plan.json -np $np --calibration lab-calibration.json --mpirun-args "$args"
Remove it with: $me down --name $NAME
EOF
}

# ---------------------------------------------------------------------------------------------
# exec, mpirun-args, status

load_state() {
  check_name
  [[ -f $STATE/config && -f $STATE/nodes ]] || die "no lab named \"$NAME\" is up (no $STATE/config)"
  # shellcheck disable=SC1091
  source "$STATE/config"
}

# exec: COMMAND inside node --node I (or --host HOSTNAME): its network namespace, a UTS namespace
# with its hostname, its CPU set. Exits with COMMAND's status.
do_exec() {
  local want_host=$1
  load_state
  ((${#CMD[@]})) || die "exec: give the command after --"
  local ns host cpus found=0
  while read -r ns host cpus _; do
    if [[ -n $want_host && $host == "$want_host" ]] || [[ -z $want_host && $ns == "$NAME-n$NODE" ]]; then
      found=1
      break
    fi
  done <"$STATE/nodes"
  ((found)) || die "exec: no node ${want_host:-$NODE} in lab \"$NAME\""
  exec ip netns exec "$ns" unshare --uts -- sh -c 'hostname "$1" && shift && exec taskset -c "$@"' \
    sh "$host" "$cpus" "${CMD[@]}"
}

do_status() {
  load_state
  echo "lab \"$NAME\": $NODES nodes x $RPN ranks, $TOPOLOGY, rate $RATE, burst $BURST, subnet $SUBNET"
  echo "state: $STATE"
  sed 's/^/  node: /' "$STATE/nodes"
  local ns
  while read -r kind ns; do
    [[ $kind == netns ]] || continue
    echo "  $ns: $(ns_exists "$ns" && echo present || echo MISSING)"
    ns_exists "$ns" && tc -n "$ns" qdisc show | grep tbf | sed 's/^/    /'
  done <"$STATE/made"
  return 0
}

# ---------------------------------------------------------------------------------------------
# down

# Removes exactly what $STATE/made lists (namespaces take their veths, bridge and qdiscs with them),
# after ending the processes still running in them. Safe to call twice.
do_down_quiet() {
  [[ -n ${STATE:-} && -d $STATE ]] || return 0
  local kind what pids ns_list=() dirs=() etc=0
  if [[ -f $STATE/made ]]; then
    while read -r kind what; do
      case $kind in
        netns) ns_list+=("$what") ;;
        etcdir) dirs+=("$what") ;;
        etcnetns) etc=1 ;;
      esac
    done <"$STATE/made"
  fi
  local ns sig
  for sig in TERM KILL; do
    pids=()
    for ns in "${ns_list[@]}"; do
      ns_exists "$ns" || continue
      mapfile -t -O "${#pids[@]}" pids < <(ip netns pids "$ns" 2>/dev/null)
    done
    ((${#pids[@]})) || break
    kill -s "$sig" "${pids[@]}" 2>/dev/null || true
    local k
    for ((k = 0; k < 20; k++)); do
      local alive=0 p
      for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
      ((alive)) || break
      sleep 0.1
    done
  done
  local failed=0
  for ns in "${ns_list[@]}"; do
    if ns_exists "$ns"; then ip netns del "$ns" || failed=1; fi
  done
  local d
  for d in "${dirs[@]}"; do
    [[ $d == /etc/netns/$NAME-* ]] && rm -rf -- "$d"
  done
  if ((etc)); then rmdir /etc/netns 2>/dev/null || true; fi
  ((failed)) && { note "could not remove every namespace; $STATE kept"; return 1; }
  rm -rf -- "$STATE"
  rmdir "$STATE_ROOT" 2>/dev/null || true
  return 0
}

do_down() {
  check_name
  if [[ ! -d $STATE ]]; then
    note "no lab named \"$NAME\" (nothing to remove)"
    return 0
  fi
  check_caps
  do_down_quiet && note "lab \"$NAME\" removed"
}

# ---------------------------------------------------------------------------------------------
# run: up, COMMAND in node 0, down on exit, error, Ctrl-C or TERM.

do_run() {
  ((${#CMD[@]})) || die "run: give the command after --"
  local cmd=("${CMD[@]}")
  # The traps first and `up` in the background, waited for: a Ctrl-C while the lab comes up is
  # handled at once (bash runs no trap while a foreground command runs, and lets a SIGINT that only
  # it received pass once the command ends). The EXIT trap stops an `up` still running (which then
  # removes what it made) before removing the lab; the command's processes go with the lab.
  RUN_CHILD=
  UP_CHILD=
  # (TERM is ignored while it cleans up, and the trap keeps the status it was called with.)
  trap 'run_rc=$?
        trap "" TERM
        if [[ -n $UP_CHILD ]]; then kill -TERM "$UP_CHILD" 2>/dev/null; wait "$UP_CHILD" 2>/dev/null; fi
        do_down_quiet || true
        exit "$run_rc"' EXIT
  trap 'note "interrupted; removing the lab"; exit 130' INT
  trap 'exit 143' TERM
  (do_up) &
  UP_CHILD=$!
  local up_rc=0
  wait "$UP_CHILD" || up_rc=$?
  UP_CHILD=
  ((up_rc == 0)) || exit "$up_rc"
  check_name
  export OSDP_LAB_NAME=$NAME OSDP_LAB_STATE=$STATE OSDP_LAB_CLUSTER=$STATE/cluster.json
  OSDP_LAB_MPIRUN_ARGS=$(source "$STATE/config" && mpirun_args)
  export OSDP_LAB_MPIRUN_ARGS
  # In the background and waited for, so a signal to this script is handled at once.
  "$0" exec --name "$NAME" --node 0 -- "${cmd[@]}" &
  RUN_CHILD=$!
  local rc=0
  wait "$RUN_CHILD" || rc=$?
  exit "$rc"
}

# ---------------------------------------------------------------------------------------------

main() {
  (($#)) || { usage; exit 2; }
  local sub=$1
  shift
  case $sub in
    up) parse_options "$@"; do_up ;;
    down) parse_options "$@"; do_down ;;
    run) parse_options "$@"; do_run ;;
    exec) parse_options "$@"; do_exec "$HOSTSEL" ;;
    mpirun-args) parse_options "$@"; load_state; mpirun_args ;;
    status) parse_options "$@"; do_status ;;
    -h | --help | help) usage ;;
    *) die "unknown command \"$sub\" (up, down, run, exec, mpirun-args, status)" ;;
  esac
}

main "$@"
