"""Keys and certificates for a Flower deployment on loopback (tests, demos, the docs' commands).

* :func:`make_tls_certificates` -- a test CA and a server certificate for the SuperLink;
* :func:`make_node_key` -- an EC key pair for SuperNode authentication (OpenSSH format);
* ``python -m fedspectral.fed.flower.deploy.certs make-certs DIR --nodes N`` -- both, into
  ``DIR``.

Private keys are written with mode 0600 and never stored elsewhere; a real deployment uses
its own PKI.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from fedspectral.atomic import atomic_write_bytes

__all__ = ["HOST", "main", "make_node_key", "make_tls_certificates"]

#: the loopback address the deployment serves on (and the server certificate names)
HOST = "127.0.0.1"


def make_tls_certificates(
    directory: str | os.PathLike, host: str = HOST, days: int = 2
) -> dict[str, Path]:
    """A test CA and a server certificate for ``host`` (SAN: that IP and ``localhost``).

    Writes ``ca.crt``, ``server.pem`` and ``server.key`` (PEM, the key unencrypted,
    mode 0600) into ``directory``; returns their paths (``ca``, ``cert``, ``key``).
    For tests and demos: a real deployment uses its own PKI.
    """
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP384R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fedspectral test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA384())
    )
    key = ec.generate_private_key(ec.SECP384R1())
    san = x509.SubjectAlternativeName(
        [x509.IPAddress(ipaddress.ip_address(host)), x509.DNSName("localhost")]
    )
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(san, critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA384())
    )
    out = {"ca": d / "ca.crt", "cert": d / "server.pem", "key": d / "server.key"}
    atomic_write_bytes(out["ca"], ca.public_bytes(serialization.Encoding.PEM))
    atomic_write_bytes(out["cert"], cert.public_bytes(serialization.Encoding.PEM))
    _write_secret(
        out["key"],
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )
    return out


def make_node_key(directory: str | os.PathLike, name: str) -> dict[str, Path]:
    """An EC P-384 key pair for SuperNode authentication, in OpenSSH format:
    ``<name>.key`` (private, mode 0600) and ``<name>.pub``; returns ``{"key", "pub"}``."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    k = ec.generate_private_key(ec.SECP384R1())
    out = {"key": d / f"{name}.key", "pub": d / f"{name}.pub"}
    _write_secret(
        out["key"],
        k.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        ),
    )
    atomic_write_bytes(
        out["pub"],
        k.public_key().public_bytes(
            serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
        ),
    )
    return out


def _write_secret(path: Path, data: bytes) -> None:
    """A private key: written atomically with mode 0600 from its first byte (a key that
    was there before is replaced, never left readable by others)."""
    atomic_write_bytes(path, data, mode=0o600)


def main(argv: list[str] | None = None) -> int:
    """``python -m fedspectral.fed.flower.deploy.certs make-certs DIR [--nodes N] [--host IP]``:
    a test CA, a server certificate for ``--host`` and ``N`` SuperNode key pairs
    (``supernode-<i>.key`` / ``.pub``) in ``DIR`` -- for loopback demos and tests;
    never commit them, and use your own PKI on a real network."""
    import argparse

    ap = argparse.ArgumentParser(
        prog="python -m fedspectral.fed.flower.deploy.certs", description=main.__doc__
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    mc = sub.add_parser("make-certs", help="test CA, server certificate, node keys")
    mc.add_argument("dir")
    mc.add_argument("--nodes", type=int, default=0)
    mc.add_argument("--host", default=HOST)
    a = ap.parse_args(argv)
    if a.nodes < 0:
        ap.error(f"--nodes must be >= 0, got {a.nodes}")
    paths = make_tls_certificates(a.dir, host=a.host)
    for i in range(a.nodes):
        paths.update(
            {f"supernode-{i}.{k}": v for k, v in make_node_key(a.dir, f"supernode-{i}").items()}
        )
    for k, v in paths.items():
        print(f"{k}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
