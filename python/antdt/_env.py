"""The environment the operator and the local runner give every worker
(``docs/kubernetes.md``), read where an SDK argument is left out.

A variable set to the empty string counts as not set.
"""

from __future__ import annotations

import os
from typing import Optional

#: The job's name.
JOB = "ANTDT_JOB"
#: The job's Kubernetes namespace.
NAMESPACE = "ANTDT_NAMESPACE"
#: This worker's stable id.
WORKER_ID = "ANTDT_WORKER_ID"


def first_set(*variables: str) -> Optional[str]:
    """The value of the first of ``variables`` that is set, or None."""
    for variable in variables:
        value = os.environ.get(variable)
        if value:
            return value
    return None


def given_or_env(argument: str, value: Optional[str], *variables: str) -> str:
    """``value`` when given (not None), else the first of ``variables`` set.

    Raises:
        ValueError: ``value`` is None and none of ``variables`` is set; the
            message starts with ``argument`` and names the variables.
    """
    if value is not None:
        return value
    found = first_set(*variables)
    if found is None:
        if len(variables) == 1:
            unset = f"${variables[0]} is not set"
        else:
            unset = "neither " + " nor ".join(f"${v}" for v in variables) + " is set"
        raise ValueError(f"{argument}: not given and {unset}")
    return found


#: The job's credential (a bearer token), or the file holding it.
TOKEN = "ANTDT_TOKEN"
TOKEN_FILE = "ANTDT_TOKEN_FILE"


#: The longest token: gRPC carries 8 KiB of headers in all (as the C++ check).
MAX_TOKEN_BYTES = 4096


def check_token(raw: str, source: str) -> str:
    """The token in ``raw`` (surrounding whitespace stripped), checked as the
    C++ services check theirs (common/credential.h).

    Raises:
        ValueError: blank, over 4096 bytes, or other than visible ASCII on one
            line; the message names ``source``, never the token.
    """
    value = raw.strip()
    if not value:
        raise ValueError(f"{source} is blank")
    if len(value.encode("utf-8", "surrogateescape")) > MAX_TOKEN_BYTES:
        raise ValueError(f"{source} holds more than {MAX_TOKEN_BYTES} bytes "
                         "(what a gRPC header carries)")
    if any(not 0x21 <= ord(c) <= 0x7e for c in value):
        raise ValueError(f"{source} holds other than visible ASCII on one line "
                         "(no gRPC client can send it)")
    return value


def token() -> Optional[str]:
    """``$ANTDT_TOKEN``, else the content of the file ``$ANTDT_TOKEN_FILE``
    names, else None; either through :func:`check_token`.

    Raises:
        ValueError: the file cannot be read, or the token is blank, too long
            or not visible ASCII; the message starts with the variable's name
            (and the path), never the content.
    """
    value = first_set(TOKEN)
    if value is not None:
        return check_token(value, f"${TOKEN}")
    path = first_set(TOKEN_FILE)
    if path is None:
        return None
    try:
        with open(path, encoding="ascii") as f:
            content = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"{TOKEN_FILE}: cannot read {path}: {e.__class__.__name__}") from None
    return check_token(content, f"{TOKEN_FILE}: {path}")


def required(variable: str) -> str:
    """The value of ``variable``, or ValueError naming it when it is not set."""
    value = first_set(variable)
    if value is None:
        raise ValueError(f"{variable}: must be set")
    return value


def count(variable: str, default: int) -> int:
    """``variable`` as an integer >= 0 (``default`` when not set), or
    ValueError naming it when it is not one."""
    raw = first_set(variable)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise ValueError(f"{variable}: must be an integer >= 0, got {raw!r}")
    return value


#: TLS, as every AntDT process reads it (common/tls.h): this process's
#: certificate and key (presented to servers), the CA bundle servers must chain
#: to, and the name their certificates must carry (for addresses, pod IPs,
#: that no certificate names). TLS is on when a certificate or a CA is set.
TLS_CERT = "ANTDT_TLS_CERT"
TLS_KEY = "ANTDT_TLS_KEY"
TLS_CA = "ANTDT_TLS_CA"
TLS_SERVER_NAME = "ANTDT_TLS_SERVER_NAME"


def _read_pem(variable: str, path: str, marker: bytes, what: str) -> bytes:
    try:
        with open(path, "rb") as f:
            content = f.read()
    except OSError as e:
        raise ValueError(f"{variable}: cannot read {path}: {e.__class__.__name__}") from None
    if marker not in content:
        raise ValueError(f"{variable}: {path} is not a PEM {what}")
    return content


def channel(address: str, options=()):
    """A gRPC channel to ``address``: TLS per ``$ANTDT_TLS_*`` (plaintext when
    neither a certificate nor a CA is set, and for ``unix:`` addresses).

    Raises:
        ValueError: a file cannot be read or is not PEM, or a certificate comes
            without its key; the message names the variable and the path, never
            the content.
    """
    import grpc  # the SDK's one gRPC dependency, imported where used

    options = list(options)
    cert_path, key_path, ca_path = first_set(TLS_CERT), first_set(TLS_KEY), first_set(TLS_CA)
    if (not cert_path and not ca_path) or address.startswith("unix:"):
        return grpc.insecure_channel(address, options=options)
    if bool(cert_path) != bool(key_path):
        missing = TLS_KEY if cert_path else TLS_CERT
        raise ValueError(f"{missing}: must be set with ${TLS_CERT if cert_path else TLS_KEY}")
    ca = _read_pem(TLS_CA, ca_path, b"-----BEGIN CERTIFICATE-----", "CA certificate") if ca_path else None
    cert = _read_pem(TLS_CERT, cert_path, b"-----BEGIN CERTIFICATE-----", "certificate") if cert_path else None
    key = _read_pem(TLS_KEY, key_path, b"PRIVATE KEY-----", "private key") if key_path else None
    server_name = first_set(TLS_SERVER_NAME)
    if server_name:
        options.append(("grpc.ssl_target_name_override", server_name))
    credentials = grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)
    return grpc.secure_channel(address, credentials, options=options)
