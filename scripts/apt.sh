# Sourced by setup.sh and setup-web.sh: apt_install PKG... installs Debian
# packages, waiting for the package manager's locks when another installer
# (apt, dpkg, unattended-upgrades, another setup.sh) holds them, with one line
# saying so, instead of failing at once. apt waits by itself for the dpkg lock
# with DPkg::Lock::Timeout, but `apt-get update` fails at once on the lists
# lock, so both are checked here (/proc/locks names a held lock's holder);
# the lock files are where apt's configuration (APT_CONFIG too) puts them.
# dpkg_missing PKG... prints the packages that are not installed.

APT_LOCK_WAIT=${APT_LOCK_WAIT:-900}

apt_dirs() {
    local st lists
    eval "$(apt-config shell st Dir::State::status/f lists Dir::State::Lists/d)"
    APT_ADMINDIR=$(dirname "${st:-/var/lib/dpkg/status}")
    APT_LISTS=${lists:-/var/lib/apt/lists/}
}

# "PID NAME" of the process holding FILE's lock, or nothing
lock_holder() {
    local f=$1 dev ino pid
    [ -e "$f" ] || return 0
    dev=$(stat -c '%Hd %Ld' "$f") || return 0
    ino=$(stat -c %i "$f")
    # shellcheck disable=SC2086
    dev=$(printf '%02x:%02x' $dev)
    pid=$(awk -v id="$dev:$ino" '$2 != "->" && $6 == id { print $5; exit }' /proc/locks)
    [ -n "$pid" ] && echo "$pid $(cat "/proc/$pid/comm" 2>/dev/null || echo '?')"
    return 0
}

apt_wait_locks() {
    local f h waited=0 said=""
    while :; do
        h=""
        for f in "$APT_ADMINDIR/lock-frontend" "$APT_ADMINDIR/lock" "${APT_LISTS%/}/lock"; do
            h=$(lock_holder "$f")
            [ -n "$h" ] && break
        done
        [ -z "$h" ] && return 0
        if [ -z "$said" ]; then
            echo "setup: waiting for the package manager's lock ($f, held by process ${h% *} ${h#* }); up to ${APT_LOCK_WAIT} s" >&2
            said=1
        fi
        if [ "$waited" -ge "$APT_LOCK_WAIT" ]; then
            echo "setup: the package manager's lock ($f) is still held by process ${h% *} ${h#* } after ${APT_LOCK_WAIT} s; run setup again when that install has ended" >&2
            return 1
        fi
        sleep 1
        waited=$((waited + 1))
    done
}

dpkg_missing() {
    local p
    apt_dirs
    for p in "$@"; do
        dpkg-query --admindir="$APT_ADMINDIR" -W -f='${Status}' "$p" 2>/dev/null \
            | grep -q 'install ok installed' || printf ' %s' "$p"
    done
}

apt_install() {
    local SUDO=""
    [ "$(id -u)" = 0 ] || SUDO=sudo
    apt_dirs
    apt_wait_locks
    # an update that lost the lists lock to another installer since the
    # check waits again; any other failure is apt's own
    until $SUDO apt-get update -qq; do
        [ -n "$(lock_holder "${APT_LISTS%/}/lock")" ] || return 1
        apt_wait_locks
    done
    apt_wait_locks
    # another installer may take the lock between the check and apt: apt
    # itself then waits for the dpkg lock
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get -o DPkg::Lock::Timeout="$APT_LOCK_WAIT" \
        install -y -qq "$@"
}
