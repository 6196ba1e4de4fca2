# tests/hosts/hosts_server.py - tandem-server and one `tandem worker` under mpirun on loopback
# (--hosts front:1,back:1). It serves; then the worker is killed (and, in a second run, stopped with
# SIGSTOP): requests fail with 503 naming the lost host within --host-timeout plus a margin, and
# /health keeps answering 503 with the lost host. Exits 77 (Skipped) without MPI.
import argparse
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "server"))
from server_harness import HOST, free_port  # noqa: E402

HOST_TIMEOUT_S = 3
# A failed step ends within the host timeout; the margin covers start-up of the step and a slow CI.
FAIL_WITHIN_S = HOST_TIMEOUT_S + 20


def request(port, method, path, body=None, timeout=60):
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        conn.request(method, path, body=json.dumps(body).encode() if body is not None else None,
                     headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        data = r.read()
        return r.status, json.loads(data) if data else None
    finally:
        conn.close()


def completion(port):
    return request(port, "POST", "/v1/completions", {"prompt": "hello there", "max_tokens": 8, "temperature": 0})


def children(pid):
    out = subprocess.run(["ps", "-o", "pid=,args=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    return [(int(line.split(None, 1)[0]), line.split(None, 1)[1]) for line in out.splitlines() if line.strip()]


class run:
    def __init__(self, build_dir, model, log_name):
        self.port = free_port()
        self.log_path = os.path.join(build_dir, "hosts-tests", log_name)
        self.log = open(self.log_path, "w")
        env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        if shutil.which("ssh") is None and shutil.which("rsh") is None:
            env["OMPI_MCA_plm_rsh_agent"] = "false"  # Open MPI refuses a local launch without a remote shell
        cmd = ["mpirun", "--oversubscribe", "--bind-to", "none", "--enable-recovery",
               "--mca", "orte_abort_on_non_zero_status", "0",
               "-np", "1", os.path.join(build_dir, "tandem-server"), "-m", model, "--host", HOST,
               "--port", str(self.port), "--hosts", "front:1,back:1", "--host-timeout", str(HOST_TIMEOUT_S),
               "--threads", "1", "--batched-session", "2", "--ctx", "256", "--cache-ram", "0",
               ":", "-np", "1", os.path.join(build_dir, "tandem"), "worker", "--threads", "1"]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env)

    def tail(self):
        self.log.flush()
        with open(self.log_path) as f:
            return "".join(f.readlines()[-25:])

    def wait_ready(self, limit_s=60):
        deadline = time.time() + limit_s
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"mpirun exited with {self.proc.returncode}: {self.tail()}")
            try:
                if request(self.port, "GET", "/health", timeout=2)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"not healthy after {limit_s} s: {self.tail()}")

    def worker_pid(self):
        for pid, args in children(self.proc.pid):
            if " worker" in args:
                return pid
        raise RuntimeError(f"no worker process under mpirun {self.proc.pid}: {children(self.proc.pid)}")

    def stop(self):
        pids = [pid for pid, _ in children(self.proc.pid)]
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        for pid in pids:  # whatever mpirun left behind
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.log.close()


def check(cond, what, r=None):
    if not cond:
        raise AssertionError(what + ("" if r is None else f"\n--- log ---\n{r.tail()}"))


def scenario(build_dir, model, how):
    r = run(build_dir, model, f"server-{how}.log")
    try:
        r.wait_ready()
        status, body = completion(r.port)
        check(status == 200 and body["choices"][0]["text"] != "", f"a completion before the failure: {status} {body}", r)
        worker = r.worker_pid()
        os.kill(worker, signal.SIGKILL if how == "kill" else signal.SIGSTOP)
        t0 = time.time()
        status, body = completion(r.port)
        took = time.time() - t0
        check(status == 503, f"{how}: a request after the worker's loss answers 503, got {status} {body}", r)
        check("back" in body["error"]["message"], f"{how}: the error names the lost host: {body}", r)
        check(took < FAIL_WITHIN_S, f"{how}: the request failed after {took:.1f} s (limit {FAIL_WITHIN_S} s)", r)
        for _ in range(3):  # /health keeps answering, naming the host
            status, body = request(r.port, "GET", "/health", timeout=5)
            check(status == 503 and any("back" in h for h in body["lost_hosts"]), f"{how}: /health {status} {body}", r)
        t0 = time.time()
        status, body = completion(r.port)
        check(status == 503 and time.time() - t0 < 5, f"{how}: later requests fail at once with 503: {status} {body}", r)
        if how == "stall":
            os.kill(worker, signal.SIGKILL)
        print(f"{how}: ok (failed in {took:.1f} s)")
    finally:
        r.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--mpi", default="")
    a = ap.parse_args()
    if a.mpi not in ("1", "ON", "TRUE", "true", "YES"):
        print("SKIPPED: this build has no MPI (apt-get install libopenmpi-dev openmpi-bin)")
        return 77
    if shutil.which("mpirun") is None:
        print("SKIPPED: mpirun is not installed (apt-get install openmpi-bin)")
        return 77
    os.makedirs(os.path.join(a.build_dir, "hosts-tests"), exist_ok=True)
    model = os.path.join(a.build_dir, "hosts-tests", "tiny.gguf")
    if not os.path.exists(model):
        subprocess.run([os.path.join(a.build_dir, "tandem"), "synth", "--preset", "tiny", "--out", model + ".tmp",
                        "--seed", "1"], check=True, timeout=120, stdout=subprocess.DEVNULL)
        os.replace(model + ".tmp", model)
    for how in ("kill", "stall"):
        scenario(a.build_dir, model, how)
    return 0


if __name__ == "__main__":
    sys.exit(main())
