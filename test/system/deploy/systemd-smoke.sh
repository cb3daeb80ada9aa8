#!/usr/bin/env bash
# config/fencegate.service under a real systemd, without a systemd machine: systemd runs as
# PID 1 of a private PID and mount namespace, with a broker, a pty pair as the RS-485 line
# and the simulated fenced valve as the device. Checks READY=1, a command end to end,
# the watchdog restart of a frozen daemon, the device ACL, no restart on exit 78, a clean
# stop. Manual (root, unshare, nsenter; ~1 minute), not part of `npm test`.
#
#   sudo test/system/deploy/systemd-smoke.sh
#
# Isolation, because a booting systemd changes the machine it boots on: /tmp, /run and /opt
# are private tmpfs (systemd-tmpfiles empties /tmp at boot: on the shared /tmp that deletes
# every other process's files), /etc and /var are overlays whose changes vanish with the
# namespace, /proc/sys is read-only, and the boot-time units that write to the machine are
# masked. The network namespace is shared: the broker listens on 127.0.0.1:18883.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SELF="$ROOT/test/deploy/systemd-smoke.sh"

if [ "${1:-}" = "--inside" ]; then
  mount --make-rprivate /
  mount -t tmpfs tmpfs /tmp
  mount -t tmpfs tmpfs /run
  mount --bind /proc/sys /proc/sys && mount -o remount,bind,ro /proc/sys
  mkdir -p /run/ovl/{etc-up,etc-work,var-up,var-work}
  mount -t overlay overlay -o lowerdir=/etc,upperdir=/run/ovl/etc-up,workdir=/run/ovl/etc-work /etc
  mount -t overlay overlay -o lowerdir=/var,upperdir=/run/ovl/var-up,workdir=/run/ovl/var-work /var
  mount -t tmpfs tmpfs /opt
  mkdir -p /opt/fencegate && mount --bind "$ROOT" /opt/fencegate
  getent passwd fencegate >/dev/null || { echo 'fencegate:x:990:990::/var/lib/fencegate:/usr/sbin/nologin' >> /etc/passwd; echo 'fencegate:x:990:' >> /etc/group; }
  rm -rf /etc/systemd/system/*.wants
  U=/run/systemd/system
  mkdir -p /etc/fencegate "$U/fencegate.service.d" /run/smoke-dev
  cp "$ROOT/config/fencegate.service" "$U/"
  for u in systemd-tmpfiles-setup.service systemd-tmpfiles-setup-dev.service systemd-tmpfiles-clean.timer \
           systemd-sysctl.service systemd-sysusers.service systemd-random-seed.service systemd-binfmt.service \
           systemd-modules-load.service systemd-journal-flush.service systemd-update-utmp.service \
           systemd-remount-fs.service systemd-firstboot.service ldconfig.service systemd-machine-id-commit.service \
           systemd-timesyncd.service systemd-pstore.service e2scrub_reap.service; do
    ln -sf /dev/null "$U/$u"
  done
  printf '[Unit]\nWants=smoke-broker.service smoke-line.service smoke-sim.service fencegate.service\n' > "$U/smoke.target"
  printf '[Service]\nExecStart=/usr/sbin/mosquitto -p 18883\n' > "$U/smoke-broker.service"
  cat > "$U/smoke-line.service" <<'EOF'
[Service]
ExecStartPre=/bin/mkdir -p /run/smoke-pty
ExecStart=/usr/bin/socat -d -d pty,raw,echo=0,link=/run/smoke-pty/device pty,raw,echo=0,link=/run/smoke-pty/master
ExecStartPost=/bin/sh -c 'for i in $(seq 50); do [ -e /run/smoke-pty/master ] && break; sleep 0.1; done; chmod 0666 $(readlink -f /run/smoke-pty/master) $(readlink -f /run/smoke-pty/device)'
EOF
  cat > "$U/smoke-sim.service" <<EOF
[Unit]
After=smoke-line.service
Requires=smoke-line.service
[Service]
ExecStart=$(command -v node) $ROOT/bin/fencegate.mjs sim --serial /run/smoke-pty/device --unit 1 --rate 0
EOF
  printf '[Unit]\nAfter=smoke-line.service smoke-sim.service smoke-broker.service\n[Service]\nWatchdogSec=6s\n' > "$U/fencegate.service.d/smoke.conf"
  cat > /etc/fencegate/gateway.yaml <<'EOF'
gatewayId: smoke
mqtt: { url: "mqtt://127.0.0.1:18883" }
buses:
  line: { type: rtu, path: /run/smoke-pty/master, baudRate: 115200, timeoutMs: 500 }
actuators:
  - id: valve-1
    bus: line
    unit: 1
    profile: fenced
    pollIntervalMs: 500
    points:
      position: { register: 32, type: u16, scale: 0.01, min: 0, max: 100, writable: true }
      actual: { register: 33, scale: 0.01, min: 0, max: 100 }
      status: { register: 34 }
journal: { path: /var/lib/fencegate/journal.db }
metrics: { enabled: false }
EOF
  # The journal, made as the install makes it (docs/deploy.md §2): the daemon never creates one.
  install -d -m 0750 -o fencegate -g fencegate /var/lib/fencegate
  runuser -u fencegate -- "$(command -v node)" "$ROOT/bin/fencegate.mjs" journal init --config /etc/fencegate/gateway.yaml >/dev/null
  # A char device outside DeviceAllow= (misc 10:200), readable and writable by everyone.
  mknod -m 0666 /run/smoke-dev/other c 10 200
  exec env container=fencegate-smoke /lib/systemd/systemd --unit=smoke.target --log-target=journal
fi

[ "$(id -u)" = 0 ] || { echo "run as root" >&2; exit 64; }
for tool in unshare nsenter socat mosquitto node; do command -v "$tool" >/dev/null || { echo "missing: $tool" >&2; exit 69; }; done

setsid unshare --pid --fork --mount --mount-proc "$SELF" --inside </dev/null >/dev/null 2>&1 &
UNSHARE=$!
PID1=""
for _ in $(seq 100); do
  PID1=$(pgrep -P "$UNSHARE" -x systemd || true)
  [ -n "$PID1" ] && break
  sleep 0.1
done
[ -n "$PID1" ] || { echo "systemd did not start" >&2; exit 70; }
trap 'kill -KILL "$PID1" 2>/dev/null || true' EXIT
IN() { nsenter -t "$PID1" -m -p "$@"; }
FG() { node "$ROOT/bin/fencegate.mjs" "$@" --broker mqtt://127.0.0.1:18883 --holder smoke-ctl; }
fail=0
check() { if [ "$2" = "$3" ]; then echo "ok    $1"; else echo "FAIL  $1: got '$2', want '$3'"; fail=1; fi; }
wait_state() { for _ in $(seq 200); do [ "$(IN systemctl show fencegate -p ActiveState --value 2>/dev/null)" = "$1" ] && return 0; sleep 0.2; done; return 1; }

wait_state active || true
check "READY=1: active" "$(IN systemctl show fencegate -p ActiveState --value)" active
check "runs as" "$(IN systemctl show fencegate -p User --value)" fencegate
echo "info  start: $(IN journalctl -u fencegate -o short-precise --no-pager | grep -E 'Start(ing|ed) fencegate' | awk '{print $3}' | tr '\n' ' ')"
sleep 3 # let the fenced valve's fence be read
token=$(FG lease acquire valve-1 --ttl-ms 20000 --json | sed -n 's/.*"token":\([0-9]*\).*/\1/p')
check "command through the sandbox to the device" "$(FG send valve-1 position=37 --token "$token" --json | grep -o '"applied":{"position":37}')" '"applied":{"position":37}'
first=$(IN systemctl show fencegate -p WatchdogTimestampMonotonic --value)
sleep 3
check "watchdog pings arrive" "$([ "$(IN systemctl show fencegate -p WatchdogTimestampMonotonic --value)" != "$first" ] && echo yes)" yes

IN kill -STOP "$(IN systemctl show fencegate -p MainPID --value)"
sleep 8
check "watchdog kills a frozen daemon" "$(IN journalctl -u fencegate --no-pager -o cat | grep -c 'Watchdog timeout')" 1
wait_state active || true
check "and systemd restarts it" "$(IN systemctl show fencegate -p NRestarts --value)" 1

IN sed -i 's#path: /run/smoke-pty/master#path: /run/smoke-dev/other#' /etc/fencegate/gateway.yaml
IN systemctl restart fencegate
sleep 3
check "a device outside DeviceAllow= is refused" "$(IN journalctl -u fencegate --no-pager -o cat --since -4s | grep -c 'Operation not permitted, cannot open /run/smoke-dev/other' | sed 's/^[1-9][0-9]*$/yes/')" yes

IN sed -i 's#path: /run/smoke-dev/other#path: /run/smoke-pty/master#' /etc/fencegate/gateway.yaml
echo "bogusKey: 1" | IN tee -a /etc/fencegate/gateway.yaml >/dev/null
IN systemctl restart fencegate 2>/dev/null || true
sleep 7
check "invalid configuration: exit 78, not restarted" "$(IN systemctl show fencegate -p ExecMainStatus -p ActiveState --value | tr '\n' ' ')" "78 failed "

IN sed -i '/bogusKey/d' /etc/fencegate/gateway.yaml
IN systemctl start fencegate
started=$(date +%s%N)
IN systemctl stop fencegate
check "clean stop: STOPPING=1 and inactive" "$(IN journalctl -u fencegate --no-pager -o cat | grep -c 'STOPPING=1' | sed 's/^[1-9][0-9]*$/yes/') $(IN systemctl show fencegate -p ActiveState --value)" "yes inactive"
echo "info  stop took $(( ($(date +%s%N) - started) / 1000000 )) ms"
exit $fail
