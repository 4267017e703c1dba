#!/usr/bin/env bash
# Installs everything the compat suite needs on a fresh Debian 12 machine (run as root).
# Idempotent: packages already present are left alone, so re-running is cheap.
set -euo pipefail

APT_PACKAGES=(
  zookeeper               # ZooKeeper 3.8 server + Java client + zkCli.sh
  zookeeper-bin           # C client programs cli_mt / cli_st
  libzookeeper-mt-dev     # C client library and headers
  libzookeeper-st2        # single-threaded C client runtime for bench/cload (its -dev package conflicts with the mt one; the headers are the same)
  libcurator-client-java  # Curator 5.4 jars (used by compat-tests/curator/)
  libcurator-framework-java
  libcurator-recipes-java
  libguava-java
  libslf4j-java
  default-jdk-headless    # javac for the Curator programs (java 17 on Debian 12)
  netcat-openbsd          # handy for poking four-letter words by hand; tools/zkstat.sh uses it
  libservlet-api-java     # javax.servlet for ZooKeeper's Jetty AdminServer (test_ops_admin.py)
  prometheus              # Prometheus server that scrapes Warden's /metrics (test_ops_prometheus.py)
  # A real MIT Kerberos KDC for test_sasl.py's GSSAPI tests (krb5kdc.py runs its own krb5kdc in a
  # temp dir; it never reads /etc/krb5.conf nor needs the system krb5-kdc service to be running).
  krb5-kdc                # krb5kdc, kdb5_util
  krb5-admin-server       # kadmin.local
  krb5-user               # kinit, klist
  libkrb5-dev             # krb5-config + headers: Warden's `kerberos` feature and pip's `kerberos` build on it
  libclang-dev            # bindgen, which generates libgssapi-sys's bindings for the `kerberos` feature
  gcc                     # builds compat-tests/slowsync.c, the slow-disk shim
  libfaketime             # moves one server's wall clock (test_clock_jump.py, the nemesis's clock faults)
)
# kazoo is pinned: its upstream tests (kazoo/tests) are run by this suite and
# the list of excluded cases in test_kazoo_upstream.py is for this version.
# objgraph, pyopenssl and pyjks are imported by kazoo's own test modules and
# harness (kazoo.testing.common), which test_kazoo_upstream.py runs.
# pure-sasl is kazoo's SASL (DIGEST-MD5, GSSAPI) client (test_sasl.py); its GSSAPI mechanism
# imports `kerberos` (pykerberos), a C extension built against libkrb5-dev (no wheel).
PIP_PACKAGES=(
  "kazoo==2.11.0"
  "pytest>=7,<9"
  "pytest-timeout>=2.1,<3"
  "objgraph>=3.5,<4"
  "pyopenssl>=23"
  "pyjks==20.0.0"
  "pure-sasl>=0.6,<1"
  "kerberos>=1.3,<2"
)

PY="${PYTHON:-python3}"

missing_apt=()
for p in "${APT_PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing_apt+=("$p")
  fi
done
if ((${#missing_apt[@]})); then
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=600 update
  apt-get -o DPkg::Lock::Timeout=600 install -y --no-install-recommends "${missing_apt[@]}"
fi

# Python packages go into whichever python3 runs pytest (pyenv or Debian's).
if ! "$PY" - <<'PYEOF' 2>/dev/null
import importlib.metadata as m, sys
want = {"kazoo": "2.11.0"}
for pkg in ("kazoo", "pytest", "pytest-timeout", "objgraph", "pyopenssl", "pyjks", "pure-sasl",
            "kerberos"):
    v = m.version(pkg)  # raises if missing
    if pkg in want and v != want[pkg]:
        sys.exit(1)
import kazoo.testing.harness, kazoo.tests.test_cache  # noqa: F401  (imports OpenSSL, jks, objgraph)
import kerberos  # noqa: F401  (a C extension linked to libkrb5)
PYEOF
then
  if ! "$PY" -m pip --version >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get -o DPkg::Lock::Timeout=600 update
    apt-get -o DPkg::Lock::Timeout=600 install -y --no-install-recommends python3 python3-pip python3-dev
  fi
  # Debian's own python3 refuses system-wide pip installs (PEP 668) unless told.
  if ! "$PY" -m pip install --quiet "${PIP_PACKAGES[@]}"; then
    "$PY" -m pip install --quiet --break-system-packages "${PIP_PACKAGES[@]}"
  fi
fi

# Sanity: the things the suite calls by path.
for f in /usr/share/zookeeper/bin/zkCli.sh /usr/share/java/zookeeper.jar /usr/lib/zookeeper/bin/cli_mt; do
  [[ -e "$f" ]] || { echo "install.sh: expected $f after install" >&2; exit 1; }
done
command -v javac >/dev/null || { echo "install.sh: javac missing after install" >&2; exit 1; }
for f in /usr/sbin/krb5kdc /usr/sbin/kdb5_util /usr/sbin/kadmin.local /usr/bin/kinit; do
  [[ -x "$f" ]] || { echo "install.sh: expected $f after install" >&2; exit 1; }
done
echo "install.sh: compat-test dependencies present"
