#!/usr/bin/env bash
# Make sure what the test suite talks to is here: a Postgres answering on 127.0.0.1:5432,
# headless Chromium with its driver, Alertmanager, Prometheus with promtool, and SLURM (slurmctld,
# slurmd, munge). The tests start their own Prometheus and their own one-node SLURM cluster from
# these, on free ports; the Debian services are not used. Installs with apt-get when missing.
set -euo pipefail

apt_install() {
  if ! command -v apt-get >/dev/null; then
    echo "error: $* missing and apt-get unavailable; install it by hand" >&2
    exit 1
  fi
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq || true
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >/dev/null
}

if ! pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
  if ! command -v pg_ctlcluster >/dev/null; then
    apt_install postgresql
  fi
  version=$(ls /etc/postgresql | sort -V | tail -n 1)
  echo "starting PostgreSQL $version on 127.0.0.1:5432"
  pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
  for _ in $(seq 1 30); do
    pg_isready -q -h 127.0.0.1 -p 5432 && break
    sleep 1
  done
  pg_isready -h 127.0.0.1 -p 5432 || { echo "error: PostgreSQL does not answer on 127.0.0.1:5432" >&2; exit 1; }
fi

missing=()
command -v chromium >/dev/null || missing+=(chromium)
command -v chromedriver >/dev/null || missing+=(chromium-driver)
command -v prometheus-alertmanager >/dev/null || missing+=(prometheus-alertmanager)
[ -x /usr/sbin/slurmctld ] || command -v slurmctld >/dev/null || missing+=(slurmctld)
[ -x /usr/sbin/slurmd ] || command -v slurmd >/dev/null || missing+=(slurmd)
command -v sbatch >/dev/null || missing+=(slurm-client)
[ -x /usr/sbin/munged ] || command -v munged >/dev/null || missing+=(munge)
{ command -v prometheus && command -v promtool; } >/dev/null || missing+=(prometheus)
[ -x /usr/sbin/haproxy ] || command -v haproxy >/dev/null || missing+=(haproxy)
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing ${missing[*]}"
  apt_install "${missing[@]}"
fi
echo "test services ready: postgres $(pg_isready -h 127.0.0.1 -p 5432 | cut -d' ' -f3-), $(chromium --version 2>/dev/null | head -1), alertmanager $(prometheus-alertmanager --version 2>&1 | head -1 | awk '{print $3}'), $( (slurmd -V || /usr/sbin/slurmd -V) 2>/dev/null), prometheus $(prometheus --version 2>&1 | head -1 | awk '{print $3}')"
