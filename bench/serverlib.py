"""serverlib.py - `h2oserve serve` for the benchmark scripts: started on a free port
with a data dir of its own, waited for until /health answers 200, and a small HTTP
client over it (the calls tests/integration/batchlib.py makes: request, get, post).
The integration tests have their own (tests/integration/test_server.py), which
reads the binary from the test's command line."""
import http.client
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time


class Server:
    def __init__(self, binary, model, extra, env=None):
        self.data_dir = tempfile.mkdtemp(prefix="h2oserve-bench-")
        self.proc = subprocess.Popen(
            [binary, "serve", "--model", model, "--port", "0", "--data-dir", self.data_dir,
             *extra], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
            env=dict(os.environ, **(env or {})))
        self.log = []  # every stderr line
        for line in self.proc.stderr:
            self.log.append(line)
            m = re.search(r"listening on http://[^:]+:(\d+)", line)
            if m:
                self.port = int(m.group(1))
                break
        else:
            raise RuntimeError("server did not start: " + "".join(self.log))
        threading.Thread(target=lambda: [self.log.append(x) for x in self.proc.stderr],
                         daemon=True).start()
        while True:
            try:
                if self.request("GET", "/health")[0] == 200:
                    return
            except OSError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError("server exited: " + "".join(self.log))
            time.sleep(0.1)

    def request(self, method, path, body=None, headers=None):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        h = {"Content-Type": "application/json", **(headers or {})}
        if body is not None and not isinstance(body, (bytes, str)):
            body = json.dumps(body)
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, data, r

    def get(self, path):
        return self.request("GET", path)

    def post(self, path, body):
        return self.request("POST", path, body)

    def metrics(self):
        """/metrics as {name: value} (the h2oserve: series, labels dropped)."""
        text = self.get("/metrics")[1].decode()
        return {m.group(1): float(m.group(2)) for m in
                re.finditer(r"^h2oserve:(\w+)\{[^}]*\} ([0-9.e+-]+)$", text, re.M)}

    def stop(self):
        self.proc.terminate()
        self.proc.wait()
        shutil.rmtree(self.data_dir, ignore_errors=True)
