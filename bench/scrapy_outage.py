"""A Scrapy crawl with Redis stopped: pages fetched and seconds (issue 20; run by hand).

    python -m bench.scrapy_outage [--pages 300] [--cap-seconds 120]

Serves ``--pages`` pages on 127.0.0.1 whose links form cycles (each page links
to 0, its neighbours and two pages across), points the Django settings at a
free port where no Redis listens, and runs ``scrapy runspider`` with
``BloomDupeFilter`` from page 0 (through the dupefilter, ``CONCURRENT_REQUESTS``
16, Scrapy's default). ``CLOSESPIDER_TIMEOUT`` caps a crawl that never ends.
Prints the pages fetched (hits on the site), the distinct pages and the seconds.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.anchor import free_port  # noqa: E402

SPIDER = textwrap.dedent(
    """
    import os
    import scrapy

    class Site(scrapy.Spider):
        name = "site"

        async def start(self):
            yield scrapy.Request(os.environ["START_URL"])

        def parse(self, response):
            for href in response.css("a::attr(href)").getall():
                yield response.follow(href)
    """
)


def serve(pages: int) -> tuple[ThreadingHTTPServer, Counter]:
    hits: Counter = Counter()
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            with lock:
                hits[self.path] += 1
            page = int(self.path.rsplit("/", 1)[1])
            targets = {0, (page + 1) % pages, (page - 1) % pages}
            targets |= {(page * 7 + 3) % pages, (page * 13 + 5) % pages}
            body = "".join(f'<a href="/p/{n}">{n}</a> ' for n in sorted(targets)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, hits


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pages", type=int, default=300)
    ap.add_argument("--cap-seconds", type=int, default=120)
    args = ap.parse_args(argv)
    server, hits = serve(args.pages)
    with tempfile.TemporaryDirectory(prefix="bloom-outage-") as tmp:
        env = {
            **{k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"},
            "PYTHONPATH": str(ROOT),
            "BENCH_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",  # nothing listens
            "BENCH_SCRAPY_DB": f"{tmp}/bench.sqlite3",
            "START_URL": f"http://127.0.0.1:{server.server_address[1]}/p/0",
        }
        migrate = [sys.executable, "-m", "django", "migrate", "-v", "0", "--skip-checks"]
        subprocess.run(
            [*migrate, "--settings", "bench.scrapy_settings"], env=env, cwd=ROOT, check=True
        )
        spider = Path(tmp) / "outage_spider.py"
        spider.write_text(SPIDER)
        command = [sys.executable, "-m", "scrapy", "runspider", str(spider)]
        for setting in (
            "DUPEFILTER_CLASS=django_bloom.contrib.scrapy.BloomDupeFilter",
            "BLOOM_DJANGO_SETTINGS=bench.scrapy_settings",
            "BLOOM_FILTER=outage-bench",
            f"CLOSESPIDER_TIMEOUT={args.cap_seconds}",
            "TELNETCONSOLE_ENABLED=False",
            "LOG_LEVEL=WARNING",
        ):
            command += ["-s", setting]
        started = time.monotonic()
        subprocess.run(command, env=env, cwd=tmp, check=True)
        seconds = time.monotonic() - started
    server.shutdown()
    print(
        f"Redis stopped, {args.pages} pages: {sum(hits.values()):,} pages fetched "
        f"({len(hits)} distinct, most fetched {max(hits.values())} times) in {seconds:.1f} s"
    )


if __name__ == "__main__":
    main()
