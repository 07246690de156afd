"""A stand-in for TensorFlow Serving's REST Predict API on loopback, for one model: `GET /v1/models/m` (the versions
loaded) and `POST /v1/models/m/versions/<v>:predict` with columnar `inputs`, run by the loaded SavedModel's
signature; it keeps how long each request's parsing and run took (`timings`)."""

from __future__ import annotations

import http.server
import json
import threading
import time

import numpy as np
import tensorflow as tf


class RestStandIn:
    """Serves version `version` of `serving` (loaded with tf.saved_model.load) until `close()`."""

    def __init__(self, serving, version: int):
        self.model = tf.saved_model.load(str(serving / str(version)))
        self.timings: list[dict] = []  # per POST: signature, request bytes, parse_s, run_s
        self.server = http.server.HTTPServer(("127.0.0.1", 0), _handler(self, version))
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.base = f"http://127.0.0.1:{self.server.server_port}/v1/models/m"

    def predict(self, body: bytes) -> dict:
        """The outputs of the request `body` names, as TensorFlow Serving's JSON gives them."""
        started = time.perf_counter()
        request = json.loads(body)
        signature = self.model.signatures[request["signature_name"]]
        specs = signature.structured_input_signature[1]
        inputs = {name: tf.constant(np.array(value, specs[name].dtype.as_numpy_dtype))
                  for name, value in request["inputs"].items()}
        parsed = time.perf_counter()
        outputs = {name: value.numpy().decode() if value.dtype == tf.string else value.numpy().tolist()
                   for name, value in signature(**inputs).items()}
        self.timings.append({"signature": request["signature_name"], "bytes": len(body),
                             "parse_s": parsed - started, "run_s": time.perf_counter() - parsed})
        return outputs

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _handler(stand_in: RestStandIn, version: int):
    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):  # noqa: N802 - the handler's name
            self._answer({"model_version_status": [{"version": str(version), "state": "AVAILABLE"}]})

        def do_POST(self):  # noqa: N802
            self._answer({"outputs": stand_in.predict(self.rfile.read(int(self.headers["Content-Length"])))})

        def log_message(self, *args):
            pass

    return Handler
