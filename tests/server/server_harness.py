# tests/server/server_harness.py - starts a real tandem-server on a free loopback port with the
# tiny synth model and gives tests small HTTP helpers. Every wait is bounded; the server is
# always stopped (SIGTERM, then SIGKILL) when the block ends.
import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import time

HOST = "127.0.0.1"


def free_port():
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def tiny_model(build_dir):
    """The demo model, written once per build folder by `tandem synth`."""
    path = os.path.join(build_dir, "server-tests", "tiny.gguf")
    if not os.path.exists(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        subprocess.run([os.path.join(build_dir, "tandem"), "synth", "--preset", "tiny", "--out", path + ".tmp",
                        "--seed", "1"], check=True, timeout=120)
        os.replace(path + ".tmp", path)
    return path


class server:
    def __init__(self, build_dir, args, log_name="server.log", env=None, model=None, binary=None, preexec_fn=None):
        self.port = free_port()
        self.build_dir = build_dir
        self.log_path = os.path.join(build_dir, "server-tests", log_name)
        os.makedirs(os.path.dirname(self.log_path), exist_ok=True)
        # Another model than the tiny one answers to the tiny one's name, so requests stay the same.
        model_args = ["-m", tiny_model(build_dir)] if model is None else ["-m", model, "--alias", "tiny.gguf"]
        cmd = [binary or os.path.join(build_dir, "tandem-server")] + model_args + ["--host", HOST,
               "--port", str(self.port)] + list(args)
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT,
                                     env=dict(os.environ, **env) if env else None, preexec_fn=preexec_fn)
        self.exit_code = None

    def wait_ready(self, limit_s=120):
        deadline = time.time() + limit_s
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tandem-server exited with {self.proc.returncode}: {self.log_tail()}")
            try:
                status, _, _ = self.request("GET", "/health", timeout=2)
                if status == 200:
                    return self
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"tandem-server not healthy after {limit_s} s: {self.log_tail()}")

    def log_tail(self, n=20):
        if not self.log.closed:
            self.log.flush()
        with open(self.log_path) as f:
            return "".join(f.readlines()[-n:])

    def stop(self, limit_s=60):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=limit_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.exit_code = self.proc.returncode
        self.log.close()
        return self.exit_code

    def request(self, method, path, body=None, headers=None, timeout=300):
        conn = http.client.HTTPConnection(HOST, self.port, timeout=timeout)
        try:
            data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
            h = {"Content-Type": "application/json"}
            h.update(headers or {})
            conn.request(method, path, body=data, headers=h)
            r = conn.getresponse()
            return r.status, dict(r.getheaders()), r.read()
        finally:
            conn.close()

    def post_json(self, path, body, headers=None, timeout=300):
        status, hdrs, data = self.request("POST", path, body, headers, timeout)
        return status, json.loads(data) if data else None

    def get_json(self, path, headers=None):
        status, _, data = self.request("GET", path, None, headers)
        return status, json.loads(data)

    def slots_busy(self, headers=None):
        _, slots = self.get_json("/slots", headers)
        return sum(1 for s in slots if s["is_processing"])

    def wait_idle(self, limit_s=30, headers=None):
        deadline = time.time() + limit_s
        while time.time() < deadline:
            if self.slots_busy(headers) == 0:
                return True
            time.sleep(0.05)
        return False


@contextlib.contextmanager
def running(build_dir, args, log_name="server.log", model=None, binary=None):
    s = server(build_dir, args, log_name, model=model, binary=binary)
    try:
        yield s.wait_ready()
    finally:
        s.stop()


def stream_events(port, path, body, on_data, timeout=300, headers=None):
    """POSTs a streaming request and calls on_data(parsed_json_or_str, t) for each SSE data line.
    Returns when the server closes the stream or on_data returns False (then the socket is closed:
    a client disconnect)."""
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    conn.request("POST", path, body=json.dumps(body).encode(), headers=h)
    r = conn.getresponse()
    if r.status != 200:
        data = r.read()
        conn.close()
        raise RuntimeError(f"stream status {r.status}: {data[:300]!r}")
    try:
        while True:
            line = r.readline()
            if not line:
                return
            line = line.decode("utf-8", "replace").rstrip("\r\n")
            if not line.startswith("data: "):
                continue
            payload = line[6:]
            try:
                payload = json.loads(payload)
            except ValueError:
                pass
            if on_data(payload, time.time()) is False:
                return
    finally:
        conn.close()


if __name__ == "__main__":
    # Test set-up: `server_harness.py BUILD_DIR` writes the tiny model once for all server tests.
    import sys
    print(tiny_model(sys.argv[1]))
