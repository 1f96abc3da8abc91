#!/usr/bin/python3
"""Certificates for a multi-node cluster under mutual TLS, made at run time with `openssl`.

One CA (`ca`), one certificate per node naming the node's address and 127.0.0.1 (a task and
the sidecar of a node share it, as docs/security.md suggests), and one for the harness itself
(the client certificate of its HTTPS reads). Made in the run folder; never committed.

    certs = Certs(os.path.join(log_dir, "tls"))
    certs.node("n1", "10.213.5.1")       # n1.crt / n1.key
    certs.flags("n1")                    # --tls_cert_file ... --tls_key_file ... --tls_ca_file ...
    certs.context()                      # ssl.SSLContext: verifies against ca, presents harness

A second CA (`other_ca`) is there to make certificates the cluster must refuse. LoopbackCerts
names 127.0.0.1 and localhost (the loopback TLS tests and benches).

The HTTPS test of the civetweb server (tests/integration) has its own layout, in PEM files with
serials it chooses (`make_pem_certs`, `issue_pem`, `pem_context`): it rotates them under a
running server and checks which serial is served.
Standard library only.
"""

import os
import shutil
import ssl
import subprocess

from trainscope_testing.waiting import HarnessError

CAS = ("ca", "other_ca")
HARNESS = "harness"  # the client certificate of the harness's own reads


def openssl(*args, stdin=None):
    """stdout of `openssl args` (stdin given as input); HarnessError when it fails."""
    r = subprocess.run(["openssl", *args], capture_output=True, text=True, input=stdin,
                       timeout=30)
    if r.returncode != 0:
        raise HarnessError(f"openssl {' '.join(args)}: {r.stderr.strip()}")
    return r.stdout


class Certs:
    """The CAs and leaf certificates in `dir` (made when missing; attach reuses them)."""

    def __init__(self, dir):
        if shutil.which("openssl") is None:
            raise HarnessError("--tls needs the openssl command (apt-get install openssl)")
        self.dir = os.path.abspath(dir)
        os.makedirs(self.dir, mode=0o700, exist_ok=True)
        for ca in CAS:
            if not os.path.exists(self.path(ca, "crt")):
                openssl("req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", self.path(ca, "key"),
                        "-out", self.path(ca, "crt"), "-days", "30",
                        "-subj", f"/CN=trainscope multinode {ca}")
        if not os.path.exists(self.path(HARNESS, "crt")):
            self.leaf(HARNESS, san="IP:127.0.0.1")

    def path(self, name, ext):
        return os.path.join(self.dir, f"{name}.{ext}")

    def leaf(self, name, san, ca="ca"):
        """Certificate `name` signed by `ca`, naming `san` (openssl syntax), for server and
        client use (every process is both); returns the certificate's path."""
        key, csr, ext = self.path(name, "key"), self.path(name, "csr"), self.path(name, "ext")
        openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                "-keyout", key, "-out", csr, "-subj", f"/CN={name}")
        with open(ext, "w") as f:
            f.write(f"subjectAltName={san}\nextendedKeyUsage=serverAuth,clientAuth\n")
        openssl("x509", "-req", "-in", csr, "-CA", self.path(ca, "crt"), "-CAkey",
                self.path(ca, "key"), "-set_serial", str(int.from_bytes(os.urandom(8), "big")),
                "-out", self.path(name, "crt"), "-days", "30", "-extfile", ext)
        return self.path(name, "crt")

    def node(self, name, address, ca="ca"):
        """The certificate of a node: its address (what the spec gives) and 127.0.0.1 (where
        the tasks send spans to their sidecar)."""
        return self.leaf(name, f"IP:{address},IP:127.0.0.1,DNS:{name}", ca)

    def flags(self, name, ca="ca"):
        """The three flags of a process presenting `name` and trusting `ca`."""
        return ["--tls_cert_file", self.path(name, "crt"), "--tls_key_file",
                self.path(name, "key"), "--tls_ca_file", self.path(ca, "crt")]

    def context(self):
        """A client context for HTTPS reads: the server must chain to ca and name the address
        asked; the harness's certificate is presented (the sidecars ask for one)."""
        ctx = ssl.create_default_context(cafile=self.path("ca", "crt"))
        ctx.load_cert_chain(self.path(HARNESS, "crt"), self.path(HARNESS, "key"))
        return ctx


class LoopbackCerts(Certs):
    """Certs whose leaves name 127.0.0.1 and localhost unless told otherwise."""

    def leaf(self, name, ca="ca", san="IP:127.0.0.1,DNS:localhost"):
        return super().leaf(name, san, ca)


def make_pem_certs(d):
    """In d: ca.pem; server.pem/.key for localhost and 127.0.0.1; client.pem/.key of the CA;
    rogue.pem/.key of another CA (RSA, serials 0x1001, 0x2001, 0x3001)."""
    for ca in CAS:
        _openssl_in(d, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{ca}.key",
                    "-out", f"{ca}.pem", "-days", "2", "-subj", f"/CN={ca}")
    with open(os.path.join(d, "server.ext"), "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    issue_pem(d, "server", "ca", serial=0x1001, ext="server.ext")
    issue_pem(d, "client", "ca", serial=0x2001)
    issue_pem(d, "rogue", "other_ca", serial=0x3001)


def issue_pem(d, name, ca, serial, ext=None, out=None):
    """name.pem (or `out`) signed by ca with `serial`; the key is made when missing, else kept."""
    if not os.path.exists(os.path.join(d, f"{name}.key")):
        _openssl_in(d, "req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out",
                    f"{name}.csr", "-subj", f"/CN={name}")
    _openssl_in(d, "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey",
                f"{ca}.key", "-set_serial", str(serial), "-days", "2", "-out",
                out or f"{name}.pem", *(["-extfile", ext] if ext else []))


def pem_context(d, client="client"):
    """A client context trusting d/ca.pem, presenting client.pem (none when client is None)."""
    ctx = ssl.create_default_context(cafile=os.path.join(d, "ca.pem"))
    if client:
        ctx.load_cert_chain(os.path.join(d, f"{client}.pem"), os.path.join(d, f"{client}.key"))
    return ctx


def _openssl_in(d, *args):
    subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)
