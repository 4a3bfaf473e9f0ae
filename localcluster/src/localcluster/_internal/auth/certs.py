"""Certificates and the kubeconfig of the local cluster: a CA of its own, a server certificate it signs for
every address pods and users reach the API server on, and an admin kubeconfig."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DEFAULT_SANS = ("127.0.0.1", "localhost", "10.244.0.1")
CLUSTER_NAME = "localcluster"
ADMIN_USER = "admin"


@dataclass(frozen=True)
class ServerCerts:
    ca_cert_pem: bytes
    cert_pem: bytes
    key_pem: bytes

    def ssl_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        # the ssl module loads key material from files only; these live just long enough to be read
        with tempfile.TemporaryDirectory(prefix="dt-certs-") as tmp:
            cert, key = Path(tmp, "tls.crt"), Path(tmp, "tls.key")
            cert.write_bytes(self.cert_pem + self.ca_cert_pem)
            key.write_bytes(self.key_pem)
            key.chmod(0o600)
            context.load_cert_chain(cert, key)
        return context


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _san(entry: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(entry))
    except ValueError:
        return x509.DNSName(entry)


def generate(*, sans: tuple[str, ...] = DEFAULT_SANS, days: int = 365) -> ServerCerts:
    """A fresh CA and a server certificate (EC P-256: fast to make, accepted by Go and Python clients)."""
    now = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)
    until = now + datetime.timedelta(days=days)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("localcluster-ca")
    ca_cert = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now).not_valid_after(until)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False, encipher_only=False,
                                     decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    service_names = ("kubernetes", "kubernetes.default", "kubernetes.default.svc",
                     "kubernetes.default.svc.cluster.local")
    names = [_san(s) for s in dict.fromkeys((*sans, *service_names))]
    cert = (
        x509.CertificateBuilder().subject_name(_name("kube-apiserver")).issuer_name(ca_name)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now).not_valid_after(until)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return ServerCerts(
        ca_cert_pem=ca_cert.public_bytes(serialization.Encoding.PEM),
        cert_pem=cert.public_bytes(serialization.Encoding.PEM),
        key_pem=key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()),
    )


def kubeconfig(*, server: str, ca_path: Path, token: str, user: str = ADMIN_USER,
               namespace: str = "default") -> str:
    """A kubeconfig naming the CA by path, so kubectl and the Python client both verify the server."""
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CLUSTER_NAME,
                      "cluster": {"server": server, "certificate-authority": str(ca_path)}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": CLUSTER_NAME,
                      "context": {"cluster": CLUSTER_NAME, "user": user, "namespace": namespace}}],
        "current-context": CLUSTER_NAME,
        "preferences": {},
    }
    return yaml.safe_dump(doc, sort_keys=False)
