#!/usr/bin/env python3
"""Browser suite: Debian's chromium headless (WebGPU on its SwiftShader adapter), driven by
Playwright from PyPI with executable_path set (no browser download), pages served from
127.0.0.1. One browser start; tests/browser/suite.js runs every shared case of every operator
and dtype through js/ropekit-webgpu.js on the kernel packages (build/webgpu-packages) and
compares each with the CPU reference bit for bit.

  .venv/bin/python tests/browser/run_browser_tests.py [--packages build/webgpu-packages]
Exit 0 when every check passed; prints the adapter, its features, the variants used and
"N passed, N failed".
"""
import argparse
import functools
import http.server
import json
import os
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHROMIUM = os.environ.get("ROPEKIT_CHROMIUM", "/usr/lib/chromium/chromium")


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def end_headers(self):
        self.send_header("Cache-Control", "no-store")
        super().end_headers()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--packages", default="build/webgpu-packages", help="package folder, relative to the repository")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--ops", default="", help="comma-separated packages (default: all)")
    args = ap.parse_args()
    pkg = os.path.relpath(os.path.abspath(args.packages), ROOT)
    if pkg.startswith("..") or not os.path.isfile(os.path.join(ROOT, pkg, "rotary_embedding", "manifest.json")):
        print(f"browser: no packages in {args.packages} (build the project first)")
        return 1
    if not os.path.exists(CHROMIUM):
        print(f"browser: {CHROMIUM} missing (Debian package chromium; scripts/bootstrap.sh --python)")
        return 1
    from playwright.sync_api import sync_playwright

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=ROOT))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}/tests/browser/index.html?packages=/{pkg}" + (f"&ops={args.ops}" if args.ops else "")
    t0 = time.time()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM,
                                    args=["--headless=new", "--no-sandbox", "--enable-unsafe-webgpu"])
        page = browser.new_page()
        console = []
        def on_console(m):
            console.append(m.text)
            if m.text.startswith("progress") or "rror" in m.text:
                print("browser:", m.text, flush=True)
        page.on("console", on_console)
        page.goto(url)
        print("browser: page loaded", flush=True)
        page.wait_for_function("window.__result !== undefined", timeout=args.timeout * 1000, polling=250)
        res = page.evaluate("window.__result")
        version = browser.version
        browser.close()
    httpd.shutdown()
    a = res.get("adapter", {})
    print(f"browser: chromium {version}, adapter {a.get('vendor')}/{a.get('architecture')} "
          f"(fallback {a.get('isFallbackAdapter')}), shader-f16 {'on' if res.get('shaderF16') else 'off'}")
    print(f"browser: features {', '.join(a.get('features', []))}")
    print(f"browser: limits {json.dumps(a.get('limits', {}))}")
    for op, n in res.get("ops", {}).items():
        print(f"browser: {op}: {n} cases, {res['ms'][op]} ms")
    print("browser: variants used: " + ", ".join(f"{k} x{v}" for k, v in sorted(res.get("variants", {}).items())))
    for f in res.get("failures", []):
        print("FAIL:", f)
    for m in console[-10:]:
        if "error" in m.lower():
            print("console:", m)
    print(f"browser: {time.time() - t0:.1f} s in all")
    print(f"{res.get('passed', 0)} passed, {res.get('failed', 0)} failed")
    return 0 if res.get("failed", 1) == 0 and res.get("passed", 0) > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
