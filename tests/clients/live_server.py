"""Starts `deepinfer serve --scripted-model script.json` on a free loopback port for the SDK
tests and stops it with SIGTERM (which must exit 0)."""

import os
import re
import signal
import subprocess
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
API_KEY = "test-key"
MODEL = "deepseek-ai/DeepSeek-V4.1-Flash-1017"


class LiveServer:
    def __init__(self, deepinfer):
        self.deepinfer = deepinfer
        self.process = None
        self.port = None
        self.log = []

    def start(self, timeout=120):
        self.process = subprocess.Popen(
            [self.deepinfer, "serve", "--port", "0", "--api-key", API_KEY,
             "--scripted-model", os.path.join(HERE, "script.json"),
             "--max-model-len", "4096", "--max-num-seqs", "16"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        ready = threading.Event()

        def pump():
            for line in self.process.stdout:
                self.log.append(line)
                match = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
                if match:
                    self.port = int(match.group(1))
                if "ready on" in line:
                    ready.set()

        threading.Thread(target=pump, daemon=True).start()
        if not ready.wait(timeout):
            self.process.kill()
            raise RuntimeError("server did not become ready:\n" + "".join(self.log))
        with urllib.request.urlopen(f"{self.base_url}/health", timeout=10) as response:
            assert response.status == 200

    @property
    def base_url(self):
        return f"http://127.0.0.1:{self.port}"

    def stop(self):
        """SIGTERM; returns the exit code (the server must exit 0)."""
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=60)
        finally:
            if self.process.poll() is None:
                self.process.kill()


def deepinfer_binary():
    path = os.environ.get("DEEPINFER_BIN")
    if not path or not os.access(path, os.X_OK):
        raise RuntimeError("set DEEPINFER_BIN to the deepinfer executable")
    return path


_server = None


def shared_server():
    """One server for the whole test run (started on first use)."""
    global _server
    if _server is None:
        _server = LiveServer(deepinfer_binary())
        _server.start()
    return _server


def stop_shared_server():
    global _server
    if _server is None:
        return 0
    code = _server.stop()
    _server = None
    return code


def wait_until(predicate, timeout=10.0):
    end = time.time() + timeout
    while time.time() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return False
