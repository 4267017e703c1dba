"""Certificates for the TLS tests (test_tls.py), made with the real `openssl` (and `keytool`
for the one JKS store) in a temp dir.

`make_pki(dir)` builds:
  ca            the trusted CA (ca.pem, ca.key)
  server        CN=localhost, SAN DNS:localhost,IP:127.0.0.1, signed by ca
  server2       CN=localhost-reloaded (same SAN), signed by ca: the certificate a reload swaps in
  client1       /C=US/O=Warden Test/CN=client1, signed by ca
  client2       /C=US/O=Warden Test/CN=client2, signed by ca
  intruder      /C=US/O=Warden Test/CN=intruder, signed by another CA (rogue_ca) nobody trusts
  expired       /C=US/O=Warden Test/CN=expired, signed by ca, valid 2020-01-01..2021-01-01
                (`openssl ca -startdate/-enddate`: OpenSSL 3.0's `x509` has no -not_before)
  ca_issued     /C=US/O=Warden Test/CN=ca-issued, made exactly like expired but valid until 2099:
                the control showing `expired` is refused for its dates alone
  wrongname     CN=wrongname, SAN DNS:wrongname.invalid only, server and client use, signed by
                ca: a member certificate that names no address it is reached at
Every leaf is X.509 v3 (signed with an extension file; rustls refuses v1 certificates).
Each leaf has NAME.crt, NAME.key (unencrypted PKCS#8) and NAME.pem (certificate then key:
ZooKeeper's PEM key store). Stores for the server: server.p12 (PKCS12, password STORE_PW,
with the CA), truststore.p12 (PKCS12 trust store, password STORE_PW, made by keytool so
Java sees a trusted-certificate entry), server-enc.pem (certificate + "ENCRYPTED PRIVATE
KEY", PKCS#8 v2 aes-256-cbc, password STORE_PW), server-pbes1.pem (the same key under PKCS#8 v1
PBE-SHA1-3DES, which ZooKeeper 3.8 on Java 17 reads), server.jks (a real JKS made by keytool).
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

STORE_PW = "changeit-123"
ORG = "/C=US/O=Warden Test"


def dn(cn: str) -> str:
    """The RFC 2253 DN (Java's X500Principal.getName()) of a leaf made here."""
    return f"CN={cn},O=Warden Test,C=US"


def _run(*args: str, cwd: Path) -> None:
    r = subprocess.run(list(args), cwd=str(cwd), capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")


@dataclass
class Leaf:
    name: str
    crt: Path
    key: Path
    pem: Path  # certificate + key, one file


class Pki:
    def __init__(self, root: Path):
        self.root = root

    def leaf(self, name: str) -> Leaf:
        r = self.root
        return Leaf(name, r / f"{name}.crt", r / f"{name}.key", r / f"{name}.pem")

    @property
    def ca(self) -> Path:
        return self.root / "ca.pem"

    @property
    def rogue_ca(self) -> Path:
        return self.root / "rogue_ca.pem"

    def __getattr__(self, name: str) -> Leaf:
        if name in ("server", "server2", "client1", "client2", "intruder", "expired", "ca_issued", "wrongname"):
            return self.leaf(name)
        raise AttributeError(name)

    server_p12 = property(lambda self: self.root / "server.p12")
    trust_p12 = property(lambda self: self.root / "truststore.p12")
    server_enc_pem = property(lambda self: self.root / "server-enc.pem")
    server_pbes1_pem = property(lambda self: self.root / "server-pbes1.pem")
    server_jks = property(lambda self: self.root / "server.jks")


def _key(d: Path, name: str) -> None:
    _run("openssl", "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048",
         "-out", f"{name}.key", cwd=d)


def _ca(d: Path, name: str, subject: str) -> None:
    _key(d, name)
    _run("openssl", "req", "-x509", "-new", "-key", f"{name}.key", "-sha256", "-days", "3650",
         "-subj", subject, "-addext", "basicConstraints=critical,CA:TRUE",
         "-addext", "keyUsage=critical,keyCertSign,cRLSign", "-out", f"{name}.pem", cwd=d)


def _leaf(d: Path, name: str, subject: str, ca: str, ext: str) -> None:
    _key(d, name)
    _run("openssl", "req", "-new", "-key", f"{name}.key", "-subj", subject, "-out", f"{name}.csr", cwd=d)
    (d / f"{name}.ext").write_text(ext + "\n")
    _run("openssl", "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
         "-CAcreateserial", "-days", "825", "-sha256", "-extfile", f"{name}.ext",
         "-out", f"{name}.crt", cwd=d)
    _bundle(d, name)


def _bundle(d: Path, name: str) -> None:
    (d / f"{name}.pem").write_text((d / f"{name}.crt").read_text() + (d / f"{name}.key").read_text())


CLIENT_EXT = "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth"
SERVER_EXT = ("basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
              "extendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=DNS:localhost,IP:127.0.0.1")
WRONG_NAME_EXT = SERVER_EXT.replace("DNS:localhost,IP:127.0.0.1", "DNS:wrongname.invalid")


def _ca_issued(d: Path, name: str, subject: str, start: str, end: str) -> None:
    """A client leaf signed by ca through `openssl ca` with explicit validity dates."""
    ca_dir = d / "ca-db"
    if not ca_dir.exists():
        (ca_dir / "new").mkdir(parents=True)
        (ca_dir / "index.txt").write_text("")
        (ca_dir / "serial").write_text("1000\n")
    (ca_dir / "ca.cnf").write_text(f"""
[ ca ]
default_ca = CA_default
[ CA_default ]
database = {ca_dir}/index.txt
new_certs_dir = {ca_dir}/new
serial = {ca_dir}/serial
default_md = sha256
policy = policy_any
unique_subject = no
email_in_dn = no
[ policy_any ]
countryName = optional
organizationName = optional
commonName = supplied
[ leaf_ext ]
{CLIENT_EXT}
""")
    _key(d, name)
    _run("openssl", "req", "-new", "-key", f"{name}.key", "-subj", subject, "-out", f"{name}.csr", cwd=d)
    _run("openssl", "ca", "-batch", "-config", str(ca_dir / "ca.cnf"), "-cert", "ca.pem", "-keyfile", "ca.key",
         "-in", f"{name}.csr", "-out", f"{name}.crt", "-startdate", start, "-enddate", end, "-extensions", "leaf_ext", "-preserveDN", "-notext", cwd=d)
    _bundle(d, name)


def make_pki(root: Path) -> Pki:
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    _ca(root, "ca", f"{ORG}/CN=Warden Test CA")
    _ca(root, "rogue_ca", "/C=US/O=Rogue/CN=Rogue CA")
    _leaf(root, "server", f"{ORG}/CN=localhost", "ca", SERVER_EXT)
    _leaf(root, "server2", f"{ORG}/CN=localhost-reloaded", "ca", SERVER_EXT)
    for cn in ("client1", "client2"):
        _leaf(root, cn, f"{ORG}/CN={cn}", "ca", CLIENT_EXT)
    _leaf(root, "intruder", f"{ORG}/CN=intruder", "rogue_ca", CLIENT_EXT)
    _leaf(root, "wrongname", f"{ORG}/CN=wrongname", "ca", WRONG_NAME_EXT)
    _ca_issued(root, "expired", f"{ORG}/CN=expired", "20200101000000Z", "20210101000000Z")
    # The control for `expired`: issued the same way, but valid now.
    _ca_issued(root, "ca_issued", f"{ORG}/CN=ca-issued", "20200101000000Z", "20991231000000Z")
    # PKCS12 key store (server key + chain) and an encrypted PEM key store.
    _run("openssl", "pkcs12", "-export", "-in", "server.crt", "-inkey", "server.key", "-certfile", "ca.pem",
         "-name", "server", "-out", "server.p12", "-passout", f"pass:{STORE_PW}", cwd=root)
    _run("openssl", "pkcs8", "-topk8", "-v2", "aes-256-cbc", "-in", "server.key", "-out", "server-enc.key",
         "-passout", f"pass:{STORE_PW}", cwd=root)
    (root / "server-enc.pem").write_text((root / "server.crt").read_text() + (root / "server-enc.key").read_text())
    # The same key under PBES1 (PBE-SHA1-3DES): the encrypted PKCS#8 form ZooKeeper 3.8 on
    # Java 17 can read (its PemReader has no PBES2).
    _run("openssl", "pkcs8", "-topk8", "-v1", "PBE-SHA1-3DES", "-in", "server.key", "-out", "server-pbes1.key",
         "-passout", f"pass:{STORE_PW}", cwd=root)
    (root / "server-pbes1.pem").write_text((root / "server.crt").read_text() + (root / "server-pbes1.key").read_text())
    keytool = shutil.which("keytool")
    if keytool:
        # A PKCS12 trust store Java reads as a trustedCertEntry (OpenSSL 3.0's -nokeys export
        # lacks Java's trust attribute), and a real JKS key store.
        _run(keytool, "-importcert", "-noprompt", "-alias", "ca", "-file", "ca.pem", "-keystore", "truststore.p12",
             "-storetype", "PKCS12", "-storepass", STORE_PW, cwd=root)
        _run(keytool, "-importkeystore", "-srckeystore", "server.p12", "-srcstoretype", "PKCS12",
             "-srcstorepass", STORE_PW, "-destkeystore", "server.jks", "-deststoretype", "JKS",
             "-deststorepass", STORE_PW, "-noprompt", cwd=root)
    else:
        _run("openssl", "pkcs12", "-export", "-nokeys", "-in", "ca.pem", "-out", "truststore.p12",
             "-passout", f"pass:{STORE_PW}", cwd=root)
        (root / "server.jks").write_bytes(b"\xfe\xed\xfe\xed not a real JKS")
    return Pki(root)


if __name__ == "__main__":
    import sys
    import tempfile

    out = Path(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="tlscerts-"))
    make_pki(out)
    print(out)
