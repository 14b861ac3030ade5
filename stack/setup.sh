#!/usr/bin/env bash
# Installs everything Tideline's local stack needs, from the package registries only:
# PostgreSQL (apt, if missing), the Python venv (PyPI, pinned in requirements*.txt) and the
# JVM parts (Maven Central, via stack/jvm/pom.xml). Each step is skipped when already done.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"

say() { echo "[setup] $*"; }

apt_install() {
  say "apt-get install $*"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$@" >/dev/null
}

# --- system packages
if ! ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1; then
  apt_install postgresql postgresql-contrib
fi
if [ ! -x /usr/sbin/mariadbd ]; then
  # the stack runs the server as its own process: keep the package from starting a service
  POLICY=/usr/sbin/policy-rc.d; MADE_POLICY=""
  if [ ! -e $POLICY ]; then printf '#!/bin/sh\nexit 101\n' | $SUDO tee $POLICY >/dev/null; $SUDO chmod +x $POLICY; MADE_POLICY=1; fi
  apt_install --no-install-recommends mariadb-server mariadb-client
  [ -z "$MADE_POLICY" ] || $SUDO rm -f $POLICY
fi
command -v java >/dev/null || apt_install openjdk-17-jre-headless
command -v mvn >/dev/null || apt_install maven
command -v runuser >/dev/null || apt_install util-linux
command -v npm >/dev/null || apt_install npm
# the view's browser test drives Debian's headless Chromium through its driver
{ command -v chromium >/dev/null && command -v chromedriver >/dev/null; } || \
  apt_install --no-install-recommends chromium chromium-driver
# the container deployment's test (tests/deploy): podman and runc run the images, mmdebstrap makes
# their Debian base from Debian's packages (docker/images.sh)
{ command -v podman >/dev/null && command -v runc >/dev/null && command -v mmdebstrap >/dev/null; } || \
  apt_install podman runc mmdebstrap uidmap slirp4netns containernetworking-plugins
if [ ! -e /etc/containers/containers.conf ]; then
  # podman's defaults fail here: the default open-files limit is above what the host grants
  # (RLIMIT_NOFILE), and crun cannot run on a host with cgroups in hybrid mode
  say "writing /etc/containers/containers.conf (ulimits within the host's, runtime runc)"
  $SUDO mkdir -p /etc/containers
  printf '[containers]\ndefault_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]\n[engine]\nruntime = "runc"\n' | \
    $SUDO tee /etc/containers/containers.conf >/dev/null
fi

# --- Python venv
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  say "creating .venv with $($PY --version)"
  $PY -m venv .venv
fi
REQ_HASH=$(cat requirements.txt requirements-dev.txt | sha256sum | cut -c1-16)
if [ "$(cat .venv/.requirements 2>/dev/null)" != "$REQ_HASH" ]; then
  say "pip install -r requirements-dev.txt (pinned: the runtime's requirements.txt and the tests' tools)"
  .venv/bin/pip install -q --upgrade pip >/dev/null
  .venv/bin/pip install -q -r requirements-dev.txt
  echo "$REQ_HASH" > .venv/.requirements
fi

# --- the view's charting library (Chart.js), from npm, served by the plugin itself
VIEW=plugins/tideline/view
NPM_HASH=$(sha256sum $VIEW/package-lock.json | cut -c1-16)
if [ "$(cat $VIEW/node_modules/.lock-hash 2>/dev/null)" != "$NPM_HASH" ]; then
  say "npm ci (Chart.js for the Tideline view)"
  (cd $VIEW && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
  echo "$NPM_HASH" > $VIEW/node_modules/.lock-hash
fi

# --- JVM parts from Maven Central
POM_HASH=$(cat stack/jvm/pom.xml stack/jvm/*/pom.xml $(find stack/jvm -path "*/src/*" -type f | sort) | sha256sum | cut -c1-16)
if [ "$(cat stack/lib/.poms 2>/dev/null)" != "$POM_HASH" ]; then
  if ls stack/var/run/*.pid >/dev/null 2>&1 && [ -d stack/lib ]; then
    say "the JVM dependencies changed but the stack is running on the old jars: run 'make down', then this again"
    exit 1
  fi
  say "fetching Kafka, Connect, Debezium, Spark connector and Iceberg jars, S3Proxy and Iceberg's REST catalog with Maven (and building the stack's own classes)"
  rm -rf stack/lib
  find "${HOME}/.m2/repository" -name '*.lastUpdated' -delete 2>/dev/null || true
  mvn -q -B -f stack/jvm/pom.xml package
  echo "$POM_HASH" > stack/lib/.poms
fi
say "ready: $(ls stack/lib/kafka | wc -l) Kafka/Connect jars, $(ls stack/lib/connect-plugins/debezium-connector-postgres | wc -l)+$(ls stack/lib/connect-plugins/debezium-connector-mariadb | wc -l) Debezium jars (PostgreSQL+MariaDB), $(ls stack/lib/connect-plugins/debezium-connector-jdbc | wc -l) JDBC sink jars, $(ls stack/lib/spark | wc -l) Spark jars, $(ls stack/lib/iceberg | wc -l) Iceberg jars, the lake's S3 store ($(ls stack/lib/s3proxy | wc -l) jars) and REST catalog ($(ls stack/lib/iceberg-rest | wc -l) jars)"
