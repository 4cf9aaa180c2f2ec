"""The kubelet's endpoint for `kubectl logs`: the API server proxies GET pods/NAME/log to
https://<node InternalIP>:<daemonEndpoints.kubeletEndpoint.Port>/containerLogs/NS/POD/CONTAINER,
presenting its kubelet client certificate. One HTTPS server per node, on the node's own IP, with the
node's serving certificate; a client needs a certificate from the cluster's CA."""

import os
import ssl
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from .api import log

_FOLLOW_POLL_S = 0.2


def tail(data, lines):
    """The last `lines` lines of data (bytes); all of it for None."""
    if lines is None:
        return data
    if lines <= 0:
        return b""
    parts = data.splitlines(keepends=True)
    return b"".join(parts[-lines:])


class LogServer:
    """find_log(namespace, pod) -> (log path, running) of the pod's current sandbox, or None."""

    def __init__(self, node, cert, key, ca, find_log):
        self.node = node["name"]
        self.find_log = find_log
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        context.load_verify_locations(ca)
        context.verify_mode = ssl.CERT_REQUIRED  # the API server's kubelet client certificate
        self.httpd = ThreadingHTTPServer((node["hostIP"], 0), self._handler())
        self.httpd.daemon_threads = True
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="logs-" + self.node, daemon=True)

    def start(self):
        self.thread.start()
        log("log_server", node=self.node, port=self.port)
        return self

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # one line per request is ours, below
                pass

            def do_GET(self):  # noqa: N802 - the http.server hook
                url = urllib.parse.urlparse(self.path)
                parts = url.path.strip("/").split("/")
                if len(parts) != 4 or parts[0] != "containerLogs":
                    self.send_error(404, "only /containerLogs/NAMESPACE/POD/CONTAINER is served")
                    return
                query = urllib.parse.parse_qs(url.query)
                try:
                    lines = int(query["tailLines"][0]) if "tailLines" in query else None
                    limit = int(query["limitBytes"][0]) if "limitBytes" in query else None
                except ValueError:
                    self.send_error(400, "tailLines and limitBytes are integers")
                    return
                follow = query.get("follow", ["false"])[0] == "true"
                found = server.find_log(parts[1], parts[2])
                log("logs_request", node=server.node, pod="%s/%s" % (parts[1], parts[2]), follow=follow)
                if found is None or not os.path.exists(found[0]):
                    self.send_error(404, 'pod "%s/%s" has no container here' % (parts[1], parts[2]))
                    return
                self._send(found[0], lines, limit, follow, parts[1], parts[2])

            def _send(self, path, lines, limit, follow, namespace, pod):
                with open(path, "rb") as f:
                    data = tail(f.read(), lines)
                    if limit is not None:
                        data = data[:limit]
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain")
                    if not follow:
                        self.send_header("Content-Length", str(len(data)))
                        self.end_headers()
                        self.wfile.write(data)
                        return
                    self.end_headers()
                    try:
                        self.wfile.write(data)
                        while True:
                            more = f.read()
                            if more:
                                self.wfile.write(more)
                                self.wfile.flush()
                                continue
                            found = server.find_log(namespace, pod)
                            if found is None or not found[1]:
                                return
                            time.sleep(_FOLLOW_POLL_S)
                    except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
                        return

        return Handler
