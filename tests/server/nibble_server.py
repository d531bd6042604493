"""`nibble serve` as a child process for the Python server tests: started on a
free loopback port (--port 0, the port read from its log), ready once /health
answers, stopped with SIGTERM. Its stderr (the request log) is drained into
`lines` so that the server never blocks on a full pipe."""

import re
import subprocess
import threading
import time
import urllib.request


class NibbleServer:
    def __init__(self, binary: str, model: str, *extra: str):
        self.proc = subprocess.Popen([binary, "serve", model, "--port", "0", "-t", "1", *extra],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        deadline = time.time() + 60
        self.port = 0
        while time.time() < deadline and not self.port:
            line = self.proc.stderr.readline()
            if not line:
                raise RuntimeError("nibble serve exited: " + "".join(self.lines))
            self.lines.append(line)
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
            if m:
                self.port = int(m.group(1))
        threading.Thread(target=lambda: [self.lines.append(l) for l in self.proc.stderr], daemon=True).start()
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(self.base() + "/health", timeout=5) as r:
                    if r.status == 200:
                        return
            except Exception:
                time.sleep(0.02)
        raise RuntimeError("nibble serve was not ready within 60 s")

    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> int:
        self.proc.terminate()
        return self.proc.wait(timeout=15)
