#!/usr/bin/env bash
# Makes a CA and the certificates AntDT's TLS uses (docs/security.md), with
# openssl, into DIR:
#   ca.crt ca.key            the CA every AntDT process trusts (--tls-ca)
#   server.crt server.key    operator, sharding services, parameter servers,
#                            workers: names antdt.internal (give it as
#                            --tls-server-name: pods are dialled by IP), localhost,
#                            127.0.0.1 and ::1
#   node-NAME.crt .key       one per NODE argument: a node agent's certificate,
#                            CN=system:node:NAME (as a kubelet's client certificate
#                            is) and the server's names (the agent serves its
#                            node's workers); the Monitor takes a node's stream
#                            only from the agent whose certificate names that node
# For trying TLS out and for the tests; a cluster would use cert-manager.
#
#   scripts/make-certs.sh DIR [NODE ...]
set -euo pipefail

if [ $# -lt 1 ]; then
  echo "usage: $0 DIR [NODE ...]" >&2
  exit 2
fi
dir=$1
shift
mkdir -p "$dir"
cd "$dir"

quiet() { "$@" 2>/dev/null || { "$@"; exit 1; }; }

quiet openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 30 \
  -subj "/CN=antdt test CA" -keyout ca.key -out ca.crt

# issue NAME SUBJECT SAN: NAME.key, NAME.crt signed by the CA.
issue() {
  local name=$1 subject=$2 san=$3
  quiet openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -subj "$subject" -keyout "$name.key" -out "$name.csr"
  printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$san" >"$name.ext"
  quiet openssl x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -CAcreateserial \
    -days 30 -extfile "$name.ext" -out "$name.crt"
  rm -f "$name.csr" "$name.ext"
}

names="DNS:antdt.internal,DNS:localhost,IP:127.0.0.1,IP:::1"
issue server "/CN=antdt.internal" "$names"
for node in "$@"; do
  issue "node-$node" "/CN=system:node:$node" "$names"
done
chmod 600 ./*.key
made="ca.crt server.crt"
for node in "$@"; do made+=" node-$node.crt"; done
echo "$dir: $made"
