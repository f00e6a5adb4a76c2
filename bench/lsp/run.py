"""How long after an edit `tl lsp` publishes diagnostics, on a 2,000-line program.

Starts `tl lsp`, opens a generated program (facts, recursive rules, dense equations and
queries: 2,000 lines), then makes edits one at a time as a user would, alternately breaking
one line (a misspelt tensor read: an E0101 diagnostic) and mending it (no diagnostics), and times
each from the `didChange` sent to the `publishDiagnostics` received. The time includes the
server's 10 ms debounce.

    python3 bench/lsp/run.py [--tl target/release/tl] [--edits 40]
"""

import argparse
import json
import statistics
import subprocess
import time


def program(lines=2000):
    out = ["W = [[0.5, 0.25], [0.125, 1.0]]", "V0 = [1.0, 2.0]"]
    k = 0
    while len(out) < lines - 4:
        out.append(f"Edge(N{k}, N{k + 1}). Edge(N{k}, M{k}).")
        out.append(f"R{k}(x, y) :- Edge(x, y).")
        out.append(f"R{k}(x, z) :- R{k}(x, y), Edge(y, z).")
        out.append(f"V{k + 1}[i] = relu(W[i, j] V{k}[j]) + 0.5")
        k += 1
    out += ["R0(N0, x)?", f"V{k}?", "Count = R0(x, y)", "Count?"]
    return "\n".join(out[:lines]) + "\n"


class Server:
    def __init__(self, tl):
        self.p = subprocess.Popen([tl, "lsp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def send(self, obj):
        body = json.dumps(obj).encode()
        self.p.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.p.stdin.flush()

    def read(self):
        length = 0
        while True:
            line = self.p.stdout.readline().strip()
            if not line:
                break
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        return json.loads(self.p.stdout.read(length))

    def wait(self, pick):
        while True:
            m = self.read()
            if pick(m):
                return m


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tl", default="target/release/tl")
    ap.add_argument("--edits", type=int, default=40)
    args = ap.parse_args()
    text = program()
    uri = "file:///tmp/bench_lsp.tl"
    s = Server(args.tl)
    s.send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"capabilities": {}}})
    s.wait(lambda m: m.get("id") == 1)
    s.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
    t0 = time.perf_counter()
    s.send({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
        "uri": uri, "languageId": "tl", "version": 1, "text": text}}})
    first = s.wait(lambda m: m.get("method") == "textDocument/publishDiagnostics")
    opened = time.perf_counter() - t0
    assert first["params"]["diagnostics"] == [], first
    line = 1001  # `V250[i] = relu(W[i, j] V249[j]) + 0.5`, in the middle
    original = text.split("\n")[line]
    times = []
    for e in range(args.edits):
        broken = e % 2 == 0
        new = original.replace("] V", "] U", 1) if broken else original
        change = {"range": {"start": {"line": line, "character": 0},
                            "end": {"line": line, "character": len(original)}}, "text": new}
        t = time.perf_counter()
        s.send({"jsonrpc": "2.0", "method": "textDocument/didChange", "params": {
            "textDocument": {"uri": uri, "version": e + 2}, "contentChanges": [change]}})
        m = s.wait(lambda m: m.get("method") == "textDocument/publishDiagnostics")
        times.append((time.perf_counter() - t) * 1e3)
        codes = [d["code"] for d in m["params"]["diagnostics"]]
        assert codes == (["E0101"] if broken else []), codes
    s.send({"jsonrpc": "2.0", "id": 2, "method": "shutdown"})
    s.wait(lambda m: m.get("id") == 2)
    s.send({"jsonrpc": "2.0", "method": "exit"})
    s.p.wait()
    times.sort()
    print(f"2,000-line program: first diagnostics {opened * 1e3:.1f} ms after opening")
    print(f"{len(times)} edits: median {statistics.median(times):.1f} ms, "
          f"p90 {times[int(0.9 * len(times)) - 1]:.1f} ms, max {times[-1]:.1f} ms "
          f"(edit sent to diagnostics received, 10 ms debounce included)")


if __name__ == "__main__":
    main()
