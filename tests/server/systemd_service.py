#!/usr/bin/env python3
# tests/server/systemd_service.py BUILD_DIR - tandem-server as a systemd service without systemd:
# launcher/tandem-server.service passes `systemd-analyze verify`, and the server speaks the notify
# protocol (a datagram socket in NOTIFY_SOCKET): a loading status line, READY=1 only once /health answers 200, WATCHDOG=1
# pings at half the interval while the engine loop turns, STOPPING=1 on SIGTERM. Exit 77 (skipped)
# where systemd-analyze is missing or the build has no libsystemd.
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import server_harness as h  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def verify_unit(build_dir, work):
    unit = open(os.path.join(ROOT, "launcher", "tandem-server.service")).read()
    assert re.search(r"^Type=notify$", unit, re.M), "the unit is not Type=notify"
    assert re.search(r"^WatchdogSec=\d+", unit, re.M), "the unit has no watchdog"
    server = os.path.abspath(os.path.join(build_dir, "tandem-server"))
    path = os.path.join(work, "tandem-server.service")
    with open(path, "w") as f:
        f.write(unit.replace("/usr/local/bin/tandem-server", server))
    r = subprocess.run(["systemd-analyze", "verify", "--man=no", path], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, SYSTEMD_LOG_LEVEL="warning"))
    # Outside a booted systemd (containers, CI) verify still parses the unit; these lines are about
    # the machine, not the unit.
    machine = re.compile(r"bus|not been booted|Failed to (setup|initialize|create|open)|^$")
    complaints = [line for line in (r.stdout + r.stderr).splitlines() if not machine.search(line)]
    assert not complaints, f"systemd-analyze verify: {complaints}"


def notify_protocol(build_dir, work):
    sock_path = os.path.join(work, "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(sock_path)
    sock.settimeout(0.2)
    env = {"NOTIFY_SOCKET": sock_path, "WATCHDOG_USEC": "1000000"}
    srv = h.server(build_dir, ["--ctx", "256", "--batched-session", "1"], "systemd.log", env=env)
    messages = []  # (time, state, health status at arrival)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not any("READY=1" in m for _, m, _ in messages):
            try:
                data = sock.recv(4096).decode()
            except socket.timeout:
                assert srv.proc.poll() is None, f"tandem-server exited: {srv.log_tail()}"
                continue
            try:
                status = srv.request("GET", "/health", timeout=2)[0]
            except OSError:
                status = None
            messages.append((time.time(), data, status))
        ready = [m for m in messages if "READY=1" in m[1]]
        assert ready, f"no READY=1 within 120 s: {messages} {srv.log_tail()}"
        assert ready[0][2] == 200, f"READY=1 came before /health answered 200 ({ready[0][2]})"
        loading = [m for m in messages if "STATUS=loading weights: " in m[1] and m[0] <= ready[0][0]]
        assert loading, f"no STATUS=loading weights line before READY=1: {messages}"
        t_ready = ready[0][0]
        pings = []
        while time.time() < t_ready + 2.5:
            try:
                data = sock.recv(4096).decode()
            except socket.timeout:
                continue
            if "WATCHDOG=1" in data:
                pings.append(time.time())
        assert len(pings) >= 3, f"{len(pings)} watchdog pings in 2.5 s at a 1 s interval"
        srv.proc.send_signal(15)
        stopping = False
        end = time.time() + 30
        while time.time() < end and not stopping:
            try:
                stopping = "STOPPING=1" in sock.recv(4096).decode()
            except socket.timeout:
                if srv.proc.poll() is not None:
                    break
        assert stopping, "no STOPPING=1 after SIGTERM"
    finally:
        code = srv.stop()
        sock.close()
    assert code == 0, f"exit status {code}"


def main():
    build_dir = sys.argv[1]
    if not shutil.which("systemd-analyze"):
        print("systemd-analyze is not installed: skipped")
        return 77
    if "SYSTEMD_FOUND:INTERNAL=1" not in open(os.path.join(build_dir, "CMakeCache.txt")).read():
        print("this build has no libsystemd: skipped")
        return 77
    with tempfile.TemporaryDirectory() as work:
        verify_unit(build_dir, work)
        notify_protocol(build_dir, work)
    print("systemd service: all passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
