#!/bin/sh
# Installs the Debian packages the multi-host tests need (sshd, ssh, rsync, nftables, iproute2, unshare, Slurm,
# munge, and kubectl when none is installed: Debian's is old, 1.20; the tests were run with 1.32) when one is missing
# and we are root; never leaves a system sshd, munged, slurmd or slurmctld running.
# A failure here only skips those tests.
set -eu
PATH="$PATH:/usr/sbin:/sbin"

say() { echo "[system-packages] $*" >&2; }

# command package, one pair a line
needs="/usr/sbin/sshd openssh-server
ssh openssh-client
ssh-keygen openssh-client
rsync rsync
nft nftables
ip iproute2
ss iproute2
unshare util-linux
nsenter util-linux
setpriv util-linux
/usr/sbin/munged munge
/usr/sbin/slurmctld slurmctld
/usr/sbin/slurmd slurmd
sbatch slurm-client
srun slurm-client
kubectl kubernetes-client"

missing=$(echo "$needs" | while read -r command package; do
    command -v "$command" >/dev/null 2>&1 || echo "$package"
done | sort -u | tr '\n' ' ')

if [ "$(id -u)" -ne 0 ]; then
    say "not root: multi-host tests (network namespaces with sshd, Slurm) will be skipped"
    exit 0
fi
[ -n "$missing" ] || exit 0

# pids of sshd processes listening on TCP port 22, space separated
sshd_on_port_22() {
    ss -Hltnp 'sport = :22' 2>/dev/null | grep '"sshd"' | grep -o 'pid=[0-9]*' | cut -d= -f2 | sort -u | tr '\n' ' '
}

# pids of every munged, slurmd and slurmctld, space separated (the tests start their own, never the system's)
slurm_daemons() {
    for name in munged slurmd slurmctld; do pgrep -x "$name" || true; done | sort -u | tr '\n' ' '
}

# true when apt knows every package in $missing, so `apt-get update` can be skipped
apt_knows_all() {
    for package in $missing; do
        apt-cache show "$package" >/dev/null 2>&1 || return 1
    done
}

# Debian's postinsts start their daemons unless policy-rc.d says no; we only run them inside test namespaces.
sshd_before=$(sshd_on_port_22)
daemons_before=$(slurm_daemons)
if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    trap 'rm -f /usr/sbin/policy-rc.d' EXIT
fi

say "installing $missing"
export DEBIAN_FRONTEND=noninteractive
apt_log=$(mktemp)
# shellcheck disable=SC2086
if ! { { apt_knows_all || apt-get update -qq; } && apt-get install -y -qq --no-install-recommends $missing; } \
    </dev/null >"$apt_log" 2>&1
then
    tail -n 20 "$apt_log" >&2
    say "warning: could not install $missing (apt-get's last lines above); multi-host tests will be skipped"
    rm -f "$apt_log"
    exit 0
fi
rm -f "$apt_log"

for pid in $(sshd_on_port_22); do
    case " $sshd_before " in *" $pid "*) continue ;; esac
    say "stopping the system sshd (pid $pid) that the install started on port 22"
    kill "$pid"
done
for pid in $(slurm_daemons); do
    case " $daemons_before " in *" $pid "*) continue ;; esac
    say "stopping the system $(cat "/proc/$pid/comm" 2>/dev/null) (pid $pid) that the install started"
    kill "$pid" 2>/dev/null || true
done
say "done"
