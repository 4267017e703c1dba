"""A real MIT Kerberos KDC (Debian's krb5-kdc: krb5kdc, kdb5_util, kadmin.local) on 127.0.0.1
for test_sasl.py's GSSAPI tests.

`Kdc(base_dir)` owns everything under base_dir: kdc.conf (database, stash, logs, replay
caches all inside base_dir), krb5.conf (the one clients, servers and the JVM are pointed
at), the principal database and the krb5kdc process it starts (foreground, `-n`), which
`stop()` ends by its PID alone. Nothing reads /etc/krb5.conf or /etc/krb5kdc: every tool
runs with `env()` (KRB5_CONFIG, KRB5_KDC_PROFILE, KRB5RCACHEDIR set). Clients use TCP only
(`udp_preference_limit = 1`), which Java honours too; the KDC listens on one free port on
127.0.0.1 for both UDP and TCP (kdc_listen / kdc_tcp_listen, krb5 1.15+'s names for
kdc_ports / kdc_tcp_ports). No DNS, no reverse DNS, no hostname canonicalisation.

    with Kdc(tmp).start() as kdc:
        kdc.add_principal("zookeeper/localhost")             # random key
        kdc.add_principal("bob", "bob-pw")
        kt = kdc.keytab(tmp / "zk.keytab", "zookeeper/localhost")
        kdc.kinit("bob", tmp / "bob.cc", password="bob-pw")
        subprocess.run([...], env=kdc.env(KRB5CCNAME=str(tmp / "bob.cc"), KRB5_KTNAME=str(kt)))
"""

from __future__ import annotations

import os
import pathlib
import secrets
import socket
import subprocess
import time

KRB5KDC = "/usr/sbin/krb5kdc"
KDB5_UTIL = "/usr/sbin/kdb5_util"
KADMIN_LOCAL = "/usr/sbin/kadmin.local"
KINIT = "/usr/bin/kinit"


def _free_port() -> int:
    """A port free on 127.0.0.1 for both TCP and UDP (the KDC binds both)."""
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as t:
            t.bind(("127.0.0.1", 0))
            port = t.getsockname()[1]
            try:
                with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
                    u.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("krb5kdc: no free port on 127.0.0.1")


class Kdc:
    def __init__(self, base_dir: pathlib.Path, realm: str = "EXAMPLE.COM"):
        self.base_dir = pathlib.Path(base_dir).resolve()
        self.realm = realm
        self.krb5_conf = self.base_dir / "krb5.conf"
        self.kdc_conf = self.base_dir / "kdc.conf"
        self.log = self.base_dir / "kdc.log"
        self.port: int | None = None
        self.proc: subprocess.Popen | None = None

    # ---- configuration ------------------------------------------------------------------
    def env(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update(KRB5_CONFIG=str(self.krb5_conf), KRB5_KDC_PROFILE=str(self.kdc_conf),
                   KRB5RCACHEDIR=str(self.base_dir / "rcache"))
        env.update({k: str(v) for k, v in extra.items()})
        return env

    def _write_confs(self) -> None:
        b, r, p = self.base_dir, self.realm, self.port
        self.kdc_conf.write_text(f"""[kdcdefaults]
    kdc_listen = 127.0.0.1:{p}
    kdc_tcp_listen = 127.0.0.1:{p}

[realms]
    {r} = {{
        database_name = {b}/principal
        key_stash_file = {b}/stash
        acl_file = {b}/kadm5.acl
        admin_keytab = FILE:{b}/kadm5.keytab
        kdc_listen = 127.0.0.1:{p}
        kdc_tcp_listen = 127.0.0.1:{p}
        max_life = 10h 0m 0s
        max_renewable_life = 7d 0h 0m 0s
    }}

[logging]
    kdc = FILE:{b}/kdc.log
    admin_server = FILE:{b}/kadmin.log
    default = FILE:{b}/krb5lib.log
""")
        self.krb5_conf.write_text(f"""[libdefaults]
    default_realm = {r}
    dns_lookup_kdc = false
    dns_lookup_realm = false
    rdns = false
    dns_canonicalize_hostname = false
    udp_preference_limit = 1
    ignore_acceptor_hostname = true
    forwardable = true

[realms]
    {r} = {{
        kdc = 127.0.0.1:{p}
        admin_server = 127.0.0.1:{p}
    }}

[domain_realm]
    localhost = {r}
    127.0.0.1 = {r}
""")
        (b / "kadm5.acl").write_text("")
        (b / "rcache").mkdir(exist_ok=True)

    def _run(self, argv: list[str], stdin: str | None = None, **extra: str):
        r = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=60,
                           env=self.env(**extra))
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} exited {r.returncode}:\n{r.stdout}{r.stderr}")
        return r

    def _kadmin(self, query: str) -> str:
        r = self._run([KADMIN_LOCAL, "-r", self.realm, "-q", query])
        # kadmin.local exits 0 even when the query fails ("add_principal: ... while ...",
        # "kadmin.local: Principal x does not exist."); the only harmless stderr is this note.
        bad = [ln for ln in r.stderr.splitlines()
               if ln.strip() and not ln.startswith("No policy specified for")]
        if bad:
            raise RuntimeError(f"kadmin.local -q {query!r} failed:\n{r.stdout}{r.stderr}")
        return r.stdout

    # ---- lifecycle ----------------------------------------------------------------------
    def start(self) -> "Kdc":
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.port = _free_port()
        self._write_confs()
        self._run([KDB5_UTIL, "create", "-s", "-r", self.realm, "-P", secrets.token_hex(16)])
        for attempt in range(3):  # the free port may be taken before krb5kdc binds it
            if attempt:
                self.port = _free_port()
                self._write_confs()
            if self._launch():
                return self
        raise RuntimeError(f"krb5kdc would not start: {self._output()}")

    def _output(self) -> str:
        out = self.base_dir / "krb5kdc.out"
        return (out.read_text() if out.exists() else "") + (
            self.log.read_text() if self.log.exists() else "")

    def _launch(self) -> bool:
        with open(self.base_dir / "krb5kdc.out", "ab") as logf:
            self.proc = subprocess.Popen([KRB5KDC, "-n", "-r", self.realm], env=self.env(),
                                         stdin=subprocess.DEVNULL, stdout=logf, stderr=logf)
        # Ready once this krb5kdc logs that its sockets are up (a bare connect could reach
        # whoever else holds the port, while krb5kdc exits on "Address already in use").
        ready = f"krb5kdc[{self.proc.pid}](info): commencing operation"
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.proc = None
                return False
            if self.log.exists() and ready in self.log.read_text():
                socket.create_connection(("127.0.0.1", self.port), timeout=5).close()
                return True
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"krb5kdc did not accept on 127.0.0.1:{self.port} within 20s: "
                           f"{self._output()}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.proc = None

    def __enter__(self) -> "Kdc":
        return self if self.proc is not None else self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ---- principals, keytabs, tickets ---------------------------------------------------
    def add_principal(self, name: str, password: str | None = None) -> None:
        how = "-randkey" if password is None else f'-pw "{password}"'
        self._kadmin(f"addprinc {how} {name}")

    def keytab(self, path: pathlib.Path, *principals: str) -> pathlib.Path:
        path = pathlib.Path(path).resolve()
        names = " ".join(principals)
        try:
            self._kadmin(f"ktadd -k {path} -norandkey {names}")
        except RuntimeError as e:
            if "norandkey" not in str(e).split("failed:", 1)[1]:
                raise
            # Plain ktadd re-randomises the keys (passwords stop working), but still works.
            self._kadmin(f"ktadd -k {path} {names}")
        return path

    def kinit(self, principal: str, ccache: pathlib.Path, keytab: pathlib.Path | None = None,
              password: str | None = None) -> None:
        cc = f"FILE:{pathlib.Path(ccache).resolve()}"
        if keytab is not None:
            self._run([KINIT, "-c", cc, "-kt", str(keytab), principal], KRB5CCNAME=cc)
        else:
            self._run([KINIT, "-c", cc, principal], stdin=f"{password}\n", KRB5CCNAME=cc)
