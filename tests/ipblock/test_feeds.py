"""``bloom import-blocklist --url``: a netset feed over http and https from a local server.
An unchanged feed costs nothing (``ETag``/``If-Modified-Since``: no body, no parse, no
write, no Redis); a failed or cut-short download changes nothing."""

import io
import shutil
import ssl
import subprocess
import threading
import urllib.request
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core.management import CommandError, call_command

from django_bloom import ipblock
from django_bloom.engine.storage import Storage
from django_bloom.ipblock.feeds import FeedError, import_feed
from django_bloom.models import BlockedEntry, BlocklistFeed

pytestmark = pytest.mark.django_db

NETSET = b"# a feed\n203.0.113.0/24\n198.51.100.7\n2001:db8::/32\n"
LAST_MODIFIED = formatdate(1_700_000_000, usegmt=True)


class Feed(BaseHTTPRequestHandler):
    """Serves ``server.body`` with an ETag and Last-Modified; ``server.mode`` breaks it."""

    def do_GET(self):  # noqa: N802 - http.server's name
        server = self.server
        server.requests.append(dict(self.headers))
        etag = f'"{hash(server.body) & 0xFFFFFFFF:x}"'
        if server.mode == "error":
            self.send_error(503)
            return
        if server.mode == "" and self.headers.get("If-None-Match") == etag:
            self.send_response(304)
            self.end_headers()
            return
        body = server.body
        self.send_response(200)
        self.send_header("ETag", etag)
        self.send_header("Last-Modified", LAST_MODIFIED)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if server.mode == "cut":  # the connection drops halfway
            self.wfile.write(body[: len(body) // 2])
            self.close_connection = True
            return
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def feed_server():
    def start(body=NETSET, tls=None):
        server = ThreadingHTTPServer(("127.0.0.1", 0), Feed)
        server.body, server.mode, server.requests = body, "", []
        scheme = "http"
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            server.socket = context.wrap_socket(server.socket, server_side=True)
            scheme = "https"
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
        started.append(server)
        server.url = f"{scheme}://127.0.0.1:{server.server_address[1]}/level1.netset"
        return server

    started = []
    yield start
    for server in started:
        server.shutdown()
        server.server_close()


@pytest.fixture
def roundtrips(monkeypatch):
    calls = []
    original = Storage._send

    def counted(self, *args, **kwargs):
        calls.append(args)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Storage, "_send", counted)
    return calls


def networks():
    return sorted(BlockedEntry.objects.values_list("network", flat=True))


def test_a_feed_is_imported_then_not_downloaded_again_while_unchanged(feed_server, roundtrips):
    server = feed_server()
    first = import_feed(server.url, reason="feed")
    assert first.changed and first.imported.added == 3
    assert networks() == ["198.51.100.7/32", "2001:db8::/32", "203.0.113.0/24"]
    assert ipblock.check_ip("203.0.113.9").blocked
    roundtrips.clear()
    again = import_feed(server.url, reason="feed")
    assert not again.changed and again.imported is None
    assert server.requests[-1]["If-None-Match"] and server.requests[-1]["If-Modified-Since"]
    assert roundtrips == []  # no filter write, no Redis at all
    state = BlocklistFeed.objects.get()
    assert state.etag and state.last_modified == LAST_MODIFIED and state.checked_at
    server.body = NETSET + b"192.0.2.0/24\n"  # the feed changes: downloaded and imported
    third = import_feed(server.url, reason="feed")
    assert third.changed and third.imported.added == 1 and third.imported.duplicates == 3


@pytest.mark.parametrize("mode", ["error", "cut", "no newline"])
def test_a_failed_or_partial_download_changes_nothing(feed_server, mode):
    server = feed_server()
    import_feed(server.url)
    state = BlocklistFeed.objects.values().get()
    server.body = NETSET + b"192.0.2.0/24\n10.0.0.0/8"
    server.mode = "" if mode == "no newline" else mode
    if mode == "no newline":
        server.body = server.body.rstrip(b"\n")  # ends mid-line: cut short, perhaps
    with pytest.raises(FeedError):
        import_feed(server.url)
    assert networks() == ["198.51.100.7/32", "2001:db8::/32", "203.0.113.0/24"]
    assert BlocklistFeed.objects.values().get() == state


def test_the_command_imports_a_url_and_says_when_it_is_unchanged(feed_server):
    server = feed_server()
    out = io.StringIO()
    call_command("bloom", "import-blocklist", "--url", server.url, "--expires", "2d", stdout=out)
    assert "Imported 3 new entries" in out.getvalue()
    assert BlockedEntry.objects.filter(expires_at__isnull=False).count() == 3
    out = io.StringIO()
    call_command("bloom", "import-blocklist", "--url", server.url, "--expires", "2d", stdout=out)
    assert "unchanged" in out.getvalue()
    server.mode = "error"
    with pytest.raises(CommandError, match="503"):
        call_command("bloom", "import-blocklist", "--url", server.url, stdout=io.StringIO())


def test_an_unchanged_feed_still_extends_its_entries_expiry(feed_server):
    server = feed_server()
    call_command("bloom", "import-blocklist", "--url", server.url, "--expires", "1d",
                 "--reason", "feed", stdout=io.StringIO())  # fmt: skip
    first = BlockedEntry.objects.order_by("network").values_list("expires_at", flat=True)[0]
    call_command("bloom", "import-blocklist", "--url", server.url, "--expires", "2d",
                 "--reason", "feed", stdout=io.StringIO())  # fmt: skip
    assert server.requests[-1].get("If-None-Match")  # asked conditionally, got a 304
    expiries = set(BlockedEntry.objects.values_list("expires_at", flat=True))
    assert len(expiries) == 1 and expiries.pop() > first


def test_only_http_and_https_urls(feed_server):
    for url in ("file:///etc/passwd", "ftp://127.0.0.1/x", "127.0.0.1/x", "http://"):
        with pytest.raises(CommandError):
            call_command("bloom", "import-blocklist", "--url", url, stdout=io.StringIO())
    with pytest.raises(CommandError, match="either"):
        call_command("bloom", "import-blocklist", "x.netset", "--url", "http://127.0.0.1/",
                     stdout=io.StringIO())  # fmt: skip
    assert not BlockedEntry.objects.exists()


def test_https_feed(feed_server, tmp_path, monkeypatch):
    if shutil.which("openssl") is None:
        pytest.skip("SKIPPED LOUDLY: no openssl to make the test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    server = feed_server(tls=(cert, key))
    with pytest.raises(FeedError, match="CERTIFICATE_VERIFY_FAILED"):
        import_feed(server.url)  # not a certificate the system trusts
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # as a site with its own CA would
    # before its first request: Python 3.13's urllib keeps the TLS context of its first
    # opener (the one above), so a fresh opener; the test's own goes again at teardown
    monkeypatch.setattr(urllib.request, "_opener", None)
    assert import_feed(server.url).imported.added == 3


def test_the_firehol_feed_end_to_end(feed_server, firehol_path):
    server = feed_server(body=firehol_path.read_bytes())
    result = import_feed(server.url, reason="firehol")
    assert result.imported.added == BlockedEntry.objects.count() > 2800
    assert not import_feed(server.url).changed
