"""A JSON-over-HTTP view of the API server (python3-kubernetes does the transport and auth) and a
list+watch informer in the shape of client-go's reflector."""

import json
import random
import sys
import threading
import time

import urllib3
from kubernetes import client as kclient
from kubernetes import config as kconfig
from kubernetes.client.rest import ApiException
from kubernetes.watch.watch import iter_resp_lines


def log(event, **fields):
    """One line per action on stderr, key=value."""
    parts = ["ts=%s" % time.strftime("%H:%M:%S"), "event=%s" % event]
    for key, value in fields.items():
        text = str(value)
        parts.append("%s=%s" % (key, json.dumps(text) if (" " in text or not text) else text))
    print(" ".join(parts), file=sys.stderr, flush=True)


class Api:
    """Raw JSON requests. Retries 429, 5xx and connection failures with backoff; raises ApiException
    for other non-2xx answers (404, 409, 422...), which callers handle."""

    RETRIES = 6

    def __init__(self, server=None, kubeconfig=None, user_agent="antdt-test-kubelet"):
        configuration = kclient.Configuration()
        if kubeconfig:
            kconfig.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
        else:
            configuration.host = server
        self.host = configuration.host
        self.ca_file = configuration.ssl_ca_cert  # the server's CA (https), for the pods' kubeconfigs
        self.client = kclient.ApiClient(configuration)
        self.client.user_agent = user_agent

    def raw(self, method, path, body=None, query=None, timeout=(5, 30)):
        """One attempt; returns the open urllib3 response (used for watches)."""
        return self.client.call_api(
            path, method, query_params=list((query or {}).items()), body=body,
            header_params={"Accept": "application/json", "Content-Type": "application/json"},
            auth_settings=["BearerToken"], _preload_content=False, _return_http_data_only=True,
            _request_timeout=timeout)

    def request(self, method, path, body=None, query=None):
        delay = 0.2
        for attempt in range(self.RETRIES):
            try:
                response = self.raw(method, path, body, query)
                data = response.data
                return json.loads(data) if data else {}
            except ApiException as e:
                if e.status not in (0, 429) and e.status < 500:
                    raise
                retry_after = _retry_after(e)
                error = describe(e)
            except (urllib3.exceptions.HTTPError, OSError) as e:
                retry_after = None
                error = repr(e)
            if attempt + 1 == self.RETRIES:
                raise ApiException(status=503, reason="giving up after %d tries: %s" % (self.RETRIES, error))
            log("api_retry", method=method, path=path, error=error)
            time.sleep(retry_after if retry_after is not None else delay)
            delay = min(delay * 2, 5)

    def get(self, path):
        return self.request("GET", path)

    def update_with_retry(self, path, mutate, put_path=None):
        """GET, mutate(obj) -> obj or None (nothing to do), PUT (to put_path, e.g. a status
        subresource a node may write but not read); on 409 read again. Returns the result."""
        for _ in range(10):
            obj = self.get(path)
            new = mutate(obj)
            if new is None:
                return obj
            try:
                return self.request("PUT", put_path or path, new)
            except ApiException as e:
                if e.status != 409:
                    raise
                log("conflict_retry", path=path)
        raise ApiException(status=409, reason="still conflicting after 10 tries: %s" % path)


def _retry_after(e):
    try:
        return min(float((e.headers or {}).get("Retry-After")), 10.0)
    except (TypeError, ValueError):
        return None


def describe(e):
    """An error for a log line: ApiException's repr is empty."""
    if isinstance(e, ApiException):
        message = ""
        try:
            message = json.loads(e.body).get("message", "") if e.body else ""
        except (ValueError, AttributeError):
            pass
        return ("%s %s %s" % (e.status, e.reason or "", message)).strip()
    return repr(e)


def is_status(e, code):
    return isinstance(e, ApiException) and e.status == code


class Informer:
    """Keeps an up-to-date cache of one collection: LIST, then WATCH from the list's resourceVersion
    with bookmarks. A 410 (as HTTP status or ERROR event) relists, and the relist *replaces* the cache
    so that objects deleted meanwhile disappear; dropped connections rewatch from the last RV; other
    errors back off (0.8 s doubling to 30 s). `on_change()` is called after every change."""

    def __init__(self, api, path, on_change, name, query=None):
        self.api = api
        self.path = path
        self.query = dict(query or {})  # e.g. a fieldSelector, on the list and the watch alike
        self.on_change = on_change
        self.name = name
        self._lock = threading.Lock()
        self._objects = {}
        self.synced = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="informer-" + name, daemon=True)

    def start(self):
        self._thread.start()

    def stop(self):
        self._stop.set()

    def items(self):
        with self._lock:
            return list(self._objects.values())

    @staticmethod
    def _key(obj):
        meta = obj["metadata"]
        return meta.get("namespace", ""), meta["name"]

    def _run(self):
        delay = 0.8
        while not self._stop.is_set():
            try:
                rv = self._list()
                delay = 0.8
                while not self._stop.is_set():
                    rv = self._watch(rv)
            except _Relist:
                log("relist", informer=self.name)
            except Exception as e:  # noqa: BLE001 - the loop must survive anything the server does
                log("informer_error", informer=self.name, error=describe(e), backoff_s=round(delay, 1))
                self._stop.wait(delay * random.uniform(1, 2))
                delay = min(delay * 2, 30)

    def _list(self):
        listing = self.api.request("GET", self.path, query=self.query or None)
        with self._lock:
            self._objects = {self._key(o): o for o in listing.get("items") or []}
        self.synced.set()
        self.on_change()
        return listing["metadata"]["resourceVersion"]

    def _watch(self, rv):
        """Streams events until the server ends the watch; returns the RV to continue from."""
        timeout = random.randint(60, 120)
        query = dict(self.query, watch="1", resourceVersion=rv, allowWatchBookmarks="true", timeoutSeconds=timeout)
        try:
            response = self.api.raw("GET", self.path, query=query, timeout=(5, timeout + 30))
        except ApiException as e:
            if e.status == 410:
                raise _Relist() from e
            raise
        try:
            for line in iter_resp_lines(response):
                if self._stop.is_set():
                    break
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise _Relist()
                    raise RuntimeError("watch error: %s" % obj.get("message"))
                rv = obj.get("metadata", {}).get("resourceVersion", rv)
                if kind == "BOOKMARK":
                    continue
                with self._lock:
                    if kind == "DELETED":
                        self._objects.pop(self._key(obj), None)
                    else:
                        self._objects[self._key(obj)] = obj
                self.on_change()
        except (urllib3.exceptions.HTTPError, OSError) as e:
            log("watch_dropped", informer=self.name, error=repr(e))
            self._stop.wait(0.5)
        finally:
            response.release_conn()
        return rv


class _Relist(Exception):
    pass
