"""A stand-in for the Kubernetes API server, on loopback, that the real kubectl talks to over HTTP.

It serves what kubectl needs for the toolkit's calls: version and discovery (/api, /apis, one resource list per
group version), OpenAPI v3 documents (schemas that accept any object, as for a CRD without one, so kubectl's
client-side validation runs and passes), and create, get, list (with a label selector), JSON and strategic merge
patch as a merge, delete, and pods' logs (followed: the stream ends when the pod has ended). Objects live in memory.
Not emulated: admission and schema validation (tests/test_kubernetes_manifests.py does that), the Job and JobSet
controllers (a test plays them by calling `put`), watches, authentication, server-side apply.
"""

from __future__ import annotations

import http.server
import json
import re
import threading
import time
import urllib.parse

RESOURCES = {  # group/version -> plural -> (kind, subresources)
    "v1": {"pods": ("Pod", ["log"]), "configmaps": ("ConfigMap", [])},
    "networking.k8s.io/v1": {"networkpolicies": ("NetworkPolicy", [])},
    "jobset.x-k8s.io/v1alpha2": {"jobsets": ("JobSet", [])},
}
OBJECT_PATH = re.compile(r"^/(?:api/(?P<core>v1)|apis/(?P<gv>[^/]+/[^/]+))/namespaces/(?P<ns>[^/]+)/(?P<plural>[^/]+)"
                         r"(?:/(?P<name>[^/]+))?(?:/(?P<sub>[^/]+))?$")


class ApiStandIn:
    """Holds the objects; `url` for a kubeconfig; `put`, `get` and `delete` for the test playing controllers."""

    def __init__(self):
        self.objects: dict[tuple[str, str, str, str], dict] = {}  # (gv, plural, namespace, name) -> object
        self.logs: dict[str, str] = {}  # pod name -> log text
        self.requests: list[str] = []
        self.lock = threading.Lock()
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> "ApiStandIn":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)

    def put(self, gv: str, plural: str, obj: dict) -> None:
        meta = obj["metadata"]
        meta.setdefault("namespace", "default")
        meta.setdefault("creationTimestamp", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        meta.setdefault("uid", f"uid-{len(self.objects)}")
        kind = RESOURCES[gv][plural][0]
        with self.lock:
            self.objects[(gv, plural, meta["namespace"], meta["name"])] = {"apiVersion": gv, "kind": kind, **obj}

    def get(self, gv: str, plural: str, name: str, namespace: str = "default") -> dict | None:
        with self.lock:
            return self.objects.get((gv, plural, namespace, name))

    def names(self, gv: str, plural: str) -> list[str]:
        with self.lock:
            return sorted(key[3] for key in self.objects if key[:2] == (gv, plural))

    def delete(self, gv: str, plural: str, name: str, namespace: str = "default") -> dict | None:
        with self.lock:
            return self.objects.pop((gv, plural, namespace, name), None)

    def kubeconfig(self, path) -> str:
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "standin",
            "clusters": [{"name": "standin", "cluster": {"server": self.url}}],
            "users": [{"name": "standin", "user": {}}],
            "contexts": [{"name": "standin", "context": {"cluster": "standin", "user": "standin"}}]}))
        return str(path)


def _discovery(path: str) -> dict | None:
    if path == "/version":
        return {"major": "1", "minor": "34", "gitVersion": "v1.34.0-standin", "platform": "linux/amd64"}
    if path == "/api":
        return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
    if path == "/apis":
        groups = [gv.split("/") for gv in RESOURCES if "/" in gv]
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
            {"name": g, "versions": [{"groupVersion": f"{g}/{v}", "version": v}],
             "preferredVersion": {"groupVersion": f"{g}/{v}", "version": v}} for g, v in groups]}
    gv = path.removeprefix("/api/").removeprefix("/apis/")
    if gv in RESOURCES:
        resources = []
        for plural, (kind, subs) in RESOURCES[gv].items():
            verbs = ["create", "delete", "get", "list", "patch", "update"]
            resources.append({"name": plural, "singularName": kind.lower(), "namespaced": True, "kind": kind,
                              "verbs": verbs})
            resources += [{"name": f"{plural}/{s}", "namespaced": True, "kind": kind, "verbs": ["get"]}
                          for s in subs]
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}
    return None


def _openapi(path: str) -> dict | None:
    if path == "/openapi/v2":
        definitions = {f"standin.{gv}.{kind}": {"type": "object", "x-kubernetes-group-version-kind": [
            {"group": gv.rpartition("/")[0], "version": gv.rpartition("/")[2], "kind": kind}]}
            for gv, plurals in RESOURCES.items() for kind, _ in plurals.values()}
        return {"swagger": "2.0", "info": {"title": "standin", "version": "v1.34.0"}, "paths": {},
                "definitions": definitions}
    if path == "/openapi/v3":
        return {"paths": {("api/v1" if gv == "v1" else f"apis/{gv}"): {"serverRelativeURL": f"/openapi/v3/"
                f"{'api/v1' if gv == 'v1' else 'apis/' + gv}"} for gv in RESOURCES}}
    gv = path.removeprefix("/openapi/v3/api/").removeprefix("/openapi/v3/apis/")
    if path.startswith("/openapi/v3/") and gv in RESOURCES:
        group, _, version = gv.rpartition("/")
        schemas = {kind: {"type": "object", "x-kubernetes-preserve-unknown-fields": True,
                          "x-kubernetes-group-version-kind": [{"group": group, "version": version, "kind": kind}]}
                   for kind, _ in RESOURCES[gv].values()}
        prefix = "api/v1" if gv == "v1" else f"apis/{gv}"
        paths = {f"/{prefix}/namespaces/{{namespace}}/{plural}/{{name}}": {verb: {
            "x-kubernetes-group-version-kind": {"group": group, "version": version, "kind": kind},
            "parameters": [{"name": "fieldValidation", "in": "query", "schema": {"type": "string"}}]}
            for verb in ("patch", "put")} for plural, (kind, _) in RESOURCES[gv].items()}
        return {"openapi": "3.0.0", "info": {"title": "standin", "version": gv}, "paths": paths,
                "components": {"schemas": schemas}}
    return None


def _matches(obj: dict, selector: str) -> bool:
    labels = obj["metadata"].get("labels", {})
    return all(labels.get(k) == v for k, _, v in (term.partition("=") for term in selector.split(",") if term))


def _merge(target: dict, patch: dict) -> dict:
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = value
    return target


def _handler(api: ApiStandIn):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:
            return None

        def _reply(self, code: int, document: dict) -> None:
            body = json.dumps(document).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _missing(self, what: str) -> None:
            self._reply(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound",
                              "code": 404, "message": f"{what} not found"})

        def _route(self):
            url = urllib.parse.urlsplit(self.path)
            api.requests.append(f"{self.command} {url.path}")
            match = OBJECT_PATH.match(url.path)
            if not match:
                return url, None
            gv = match["core"] or match["gv"]
            return url, (gv, match["plural"], match["ns"], match["name"], match["sub"])

        def do_GET(self) -> None:
            url, route = self._route()
            static = _discovery(url.path) or _openapi(url.path)
            if static is not None:
                return self._reply(200, static)
            if route is None or route[1] not in RESOURCES.get(route[0], {}):
                return self._missing(url.path)
            gv, plural, namespace, name, sub = route
            if sub == "log":
                return self._log(namespace, name, "follow=true" in url.query)
            if name:
                obj = api.get(gv, plural, name, namespace)
                return self._reply(200, obj) if obj else self._missing(f"{plural} {name}")
            selector = dict(urllib.parse.parse_qsl(url.query)).get("labelSelector", "")
            with api.lock:
                items = [o for k, o in api.objects.items() if k[:3] == (gv, plural, namespace) and
                         _matches(o, selector)]
            kind = RESOURCES[gv][plural][0]
            self._reply(200, {"apiVersion": gv, "kind": f"{kind}List", "metadata": {"resourceVersion": "1"},
                              "items": items})

        def _log(self, namespace: str, name: str, follow: bool) -> None:
            if api.get("v1", "pods", name, namespace) is None:
                return self._missing(f"pod {name}")
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            sent, deadline = 0, time.monotonic() + 120
            while True:
                text = api.logs.get(name, "")
                if len(text) > sent:
                    chunk = text[sent:].encode()
                    self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                    self.wfile.flush()
                    sent = len(text)
                pod = api.get("v1", "pods", name, namespace)
                ended = pod is None or pod.get("status", {}).get("phase") in ("Succeeded", "Failed")
                if not follow or (ended and len(api.logs.get(name, "")) == sent) or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            self.wfile.write(b"0\r\n\r\n")

        def _body(self) -> dict:
            return json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")

        def do_POST(self) -> None:
            url, route = self._route()
            body = self._body()
            if route is None:
                return self._missing(url.path)
            gv, plural = route[0], route[1]
            body["metadata"]["namespace"] = route[2]
            if api.get(gv, plural, body["metadata"]["name"], route[2]):
                return self._reply(409, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                         "reason": "AlreadyExists", "code": 409})
            api.put(gv, plural, body)
            self._reply(201, api.get(gv, plural, body["metadata"]["name"], route[2]))

        def do_PATCH(self) -> None:
            url, route = self._route()
            patch = self._body()
            obj = api.get(route[0], route[1], route[3], route[2]) if route else None
            if obj is None:
                return self._missing(url.path)
            with api.lock:
                _merge(obj, patch)
            self._reply(200, obj)

        def do_DELETE(self) -> None:
            url, route = self._route()
            self._body()  # delete options (propagationPolicy): read, so the connection stays in step
            obj = api.delete(route[0], route[1], route[3], route[2]) if route and route[3] else None
            return self._reply(200, obj) if obj else self._missing(url.path)

    return Handler
