"""The token playground at ``/`` of ``bpetok serve``: its routes, then the page itself in a real
browser (headless Chromium from Debian, driven by selenium through /usr/bin/chromedriver; CI
installs both, see .ci/run; locally: apt-get install -y chromium chromium-driver)."""

from __future__ import annotations

import os
import pathlib
import re
import time

import pytest

from helpers import LLAMA_SPM, LLAMA_TESTS, QWEN3
from test_server import Server, request

QWEN2 = LLAMA_TESTS / "ggml-vocab-qwen2.gguf.gz"  # has a chat template
PLAYGROUND = pathlib.Path(__file__).resolve().parents[1] / "bpetok" / "playground"
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
MAX_SHOWN = 2000  # app.js's MAX_SHOWN


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = Server(
        tmp_path_factory.mktemp("playground") / "server.log",
        "--model", f"spm={LLAMA_SPM}", "--model", f"qwen2={QWEN2}",
        model=QWEN3,
    )
    try:
        srv.wait_healthy()
        yield srv
    finally:
        srv.stop()


def tokenize(port: int, **body) -> list:
    status, _, answer = request(port, "POST", "/tokenize", body)
    assert status == 200, answer
    return answer["tokens"]


# -- the routes -------------------------------------------------------------------------------------


def test_models_are_listed_and_picked_by_name(server):
    status, _, answer = request(server.port, "GET", "/models")
    assert status == 200
    assert [m["id"] for m in answer["data"]] == ["ggml-vocab-qwen3", "spm", "qwen2"]
    text = "Hello world"
    # the default is the first; each other is picked with "model" (ids from each file's tokenizer)
    import bpetok

    assert tokenize(server.port, content=text) == bpetok.from_gguf(QWEN3).encode(text)
    assert tokenize(server.port, content=text, model="spm") == bpetok.from_gguf(LLAMA_SPM).encode(text)
    status, _, answer = request(server.port, "POST", "/tokenize", {"content": text, "model": "nope"})
    assert status == 400 and "ggml-vocab-qwen3, spm, qwen2" in answer["error"]["message"]
    status, _, info = request(server.port, "GET", "/props?model=spm")
    assert status == 200 and info["model"] == "llama"
    status, _, answer = request(server.port, "POST", "/apply-template", {"model": "qwen2", "messages": [{"role": "user", "content": "Hi"}]})
    assert status == 200 and answer["prompt"].endswith("<|im_start|>assistant\n")
    status, _, answer = request(server.port, "POST", "/detokenize", {"model": "spm", "tokens": [15043]})
    assert status == 200 and answer == {"content": "Hello"}


def test_tokenize_with_offsets(server):
    import bpetok

    text = "Hi 🤗<|im_end|>"
    found = bpetok.from_gguf(QWEN3).encode_with_offsets(text)
    tokens = tokenize(server.port, content=text, with_offsets=True, with_pieces=True)
    assert [t["id"] for t in tokens] == found.ids
    assert [tuple(t["offsets"]) for t in tokens] == found.offsets
    assert [tuple(t["byte_offsets"]) for t in tokens] == found.byte_offsets
    assert [t["partial"] for t in tokens] == found.partial
    assert [t["special"] for t in tokens] == [False] * (len(tokens) - 1) + [True]
    assert tokens[0]["piece"] == "Hi"
    from bpetok.apps.server_requests import tokenize_request

    assert tokenize_request(bpetok.from_gguf(QWEN3), {"content": text, "with_offsets": True, "with_pieces": True}) == {"tokens": tokens}
    status, _, answer = request(server.port, "POST", "/tokenize", {"content": ["a", 1], "with_offsets": True})
    assert status == 400 and '"with_offsets" needs "content" to be a string' in answer["error"]["message"]


def test_static_files_load_nothing_from_elsewhere(server):
    import http.client

    for path, media in (("/", "text/html"), ("/playground/app.js", "text/javascript"), ("/playground/style.css", "text/css")):
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        conn.request("GET", path)
        answer = conn.getresponse()
        body = answer.read()
        assert answer.status == 200 and answer.getheader("content-type").startswith(media)
        assert answer.getheader("content-security-policy").startswith("default-src 'self'")
        assert not re.search(rb"(https?:)?//[a-z0-9.-]+\.[a-z]{2,}/", body), path  # no URL of another host
        conn.close()


# -- the page in a browser ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is in the test extra")
    from selenium.webdriver.chrome.service import Service

    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.path.exists(path):
            pytest.fail(f"{path} is missing: apt-get install -y chromium chromium-driver (.ci/run does)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--window-size=1400,1000",
                 f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def wait_for(condition, what: str, timeout: float = 30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"the page did not show {what} within {timeout}s")


def open_page(browser, port: int) -> float:
    """Load the playground; seconds until it showed its first tokens."""
    started = time.monotonic()
    browser.get(f"http://127.0.0.1:{port}/")
    wait_for(lambda: browser.execute_script("return document.body.dataset.ready === 'true'"), "its first tokens")
    return time.monotonic() - started


def shown_counts(browser) -> dict:
    return browser.execute_script(
        """const out = {};
        for (const p of document.querySelectorAll('.panel')) {
          const stat = (k) => p.querySelector(`[data-stat="${k}"]`).textContent;
          out[p.dataset.model] = {tokens: +stat('tokens'), chars: +stat('chars'), bytes: +stat('bytes'),
            perWord: stat('per-word'), spans: p.querySelectorAll('.tok').length,
            note: (p.querySelector('.note') || {}).textContent || null};
        }
        return out;"""
    )


def type_text(browser, text: str) -> None:
    from selenium.webdriver.common.by import By

    box = browser.find_element(By.ID, "text")
    box.clear()
    bmp, rest = (text, "") if text.isascii() or max(map(ord, text)) <= 0xFFFF else _split_at_astral(text)
    box.send_keys(bmp)
    if rest:  # ChromeDriver types only BMP characters (some versions refuse others): the rest is pasted
        browser.execute_script(
            "const box = arguments[0]; box.value += arguments[1]; box.dispatchEvent(new Event('input', {bubbles: true}));",
            box,
            rest,
        )


def _split_at_astral(text: str) -> tuple[str, str]:
    """``text`` cut before its first character past U+FFFF."""
    cut = next(k for k, c in enumerate(text) if ord(c) > 0xFFFF)
    return text[:cut], text[cut:]


def test_page_counts_equal_tokenize(server, browser, tmp_path):
    seconds = open_page(browser, server.port)
    in_page = int(browser.execute_script("return document.body.dataset.readyMs")) / 1000
    print(f"playground showed its first tokens {in_page:.2f} s after navigation began ({seconds:.2f} s with the driver's round trips)")
    assert seconds < 10  # a bound that catches a hang, not a timing test (docs/server.md has the figure)
    text = "Hello world! Ünïcödé and emoji 🤗 <|im_end|> tokens"
    type_text(browser, text)
    expected = {name: len(tokenize(server.port, content=text, model=name)) for name in ("ggml-vocab-qwen3", "spm", "qwen2")}
    wait_for(lambda: {k: v["tokens"] for k, v in shown_counts(browser).items()} == expected, f"the token counts {expected}")
    counts = shown_counts(browser)
    for name, shown in counts.items():
        assert shown["chars"] == len(text) and shown["bytes"] == len(text.encode())
        assert abs(float(shown["perWord"]) - expected[name] / len(text.split())) <= 0.0051  # two decimals
        assert shown["spans"] == expected[name]
    # the comparison table lists every vocabulary with its count, fewest first
    table = browser.execute_script(
        "return [...document.querySelectorAll('#compare tbody tr')].map(r => [r.dataset.model, +r.cells[1].dataset.count])"
    )
    assert dict(map(tuple, table)) == expected
    assert [count for _, count in table] == sorted(expected.values())
    # hovering a token names its id and offsets, as /tokenize gives them
    tokens = tokenize(server.port, content=text, with_offsets=True)
    titles = browser.execute_script("return [...document.querySelectorAll('.panel[data-model=\"ggml-vocab-qwen3\"] .tok')].map(s => s.title)")
    for title, token in zip(titles, tokens):
        start, end = token["offsets"]
        assert title.startswith(f"id {token['id']} · chars {start}–{end} · bytes {token['byte_offsets'][0]}–{token['byte_offsets'][1]}")
    screenshot = os.environ.get("BPETOK_PLAYGROUND_SCREENSHOT")
    browser.save_screenshot(str(screenshot or tmp_path / "playground.png"))


def test_switches_change_the_request(server, browser):
    from selenium.webdriver.common.by import By

    open_page(browser, server.port)
    text = "one <|im_end|> two"
    type_text(browser, text)
    with_special = len(tokenize(server.port, content=text))
    wait_for(lambda: shown_counts(browser)["ggml-vocab-qwen3"]["tokens"] == with_special, "parse_special's count")
    browser.find_element(By.ID, "parse-special").click()
    without = len(tokenize(server.port, content=text, parse_special=False))
    assert without != with_special
    wait_for(lambda: shown_counts(browser)["ggml-vocab-qwen3"]["tokens"] == without, "the count without parse_special")
    browser.find_element(By.ID, "add-special").click()  # the SPM vocabulary adds BOS
    spm = len(tokenize(server.port, content=text, model="spm", parse_special=False, add_special=True))
    wait_for(lambda: shown_counts(browser)["spm"]["tokens"] == spm, "the count with add_special")


def test_chat_view_marks_special_tokens(server, browser):
    from selenium.webdriver.common.by import By

    open_page(browser, server.port)
    browser.find_element(By.ID, "tab-chat").click()
    messages = [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "Hi! How many tokens is this?"}]
    status, _, answer = request(server.port, "POST", "/apply-template", {"model": "qwen2", "messages": messages})
    assert status == 200
    tokens = tokenize(server.port, content=answer["prompt"], model="qwen2", with_offsets=True)
    specials = sum(t["special"] for t in tokens)
    assert specials == 5  # <|im_start|> and <|im_end|> around two messages, and the assistant's <|im_start|>
    wait_for(lambda: browser.find_element(By.ID, "chat-count").text == str(len(tokens)), "the prompt's token count")
    assert browser.find_element(By.ID, "chat-special").text == str(specials)
    marked = browser.execute_script("return [...document.querySelectorAll('#chat-tokens .tok.special')].map(s => s.textContent)")
    assert marked == ["<|im_start|>", "<|im_end|>", "<|im_start|>", "<|im_end|>", "<|im_start|>"]
    # a conversation that is not JSON is said so, not sent
    box = browser.find_element(By.ID, "messages")
    box.send_keys("}")
    wait_for(lambda: "not JSON" in browser.find_element(By.ID, "chat-error").text, "the JSON error")


def test_a_large_paste_shows_a_bounded_number_of_tokens(server, browser):
    open_page(browser, server.port)
    text = ("The quick brown fox jumps over the lazy dog. 日本語のテキスト 🤗\n" * 14000)[: 1 << 20]
    started = time.monotonic()
    browser.execute_script(
        "const box = document.getElementById('text'); box.value = arguments[0];"
        "box.dispatchEvent(new Event('input'));",
        text,
    )
    expected = len(tokenize(server.port, content=text))
    wait_for(lambda: shown_counts(browser)["ggml-vocab-qwen3"]["tokens"] == expected, "the 1 MB text's count", timeout=120)
    print(f"1 MB paste: counts shown after {time.monotonic() - started:.2f} s")
    counts = shown_counts(browser)["ggml-vocab-qwen3"]
    assert counts["spans"] == MAX_SHOWN
    assert counts["note"] == f"showing the first {MAX_SHOWN:,} of {expected:,} tokens"
    # the page still answers: typing more changes the counts again
    browser.execute_script(
        "const box = document.getElementById('text'); box.value = 'short'; box.dispatchEvent(new Event('input'));"
    )
    wait_for(lambda: shown_counts(browser)["ggml-vocab-qwen3"]["tokens"] == len(tokenize(server.port, content="short")), "the new count")


def test_several_models_in_worker_processes(tmp_path):
    srv = Server(tmp_path / "workers.log", "--workers", "2", "--model", f"spm={LLAMA_SPM}", model=QWEN3)
    try:
        srv.wait_healthy()
        status, _, answer = request(srv.port, "GET", "/models")
        assert status == 200 and [m["id"] for m in answer["data"]] == ["ggml-vocab-qwen3", "spm"]
        assert tokenize(srv.port, content="Hello", model="spm", add_special=True) == [1, 15043]
    finally:
        srv.stop()


def test_serve_refuses_two_models_of_one_name(tmp_path):
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "bpetok.apps.cli", "serve", str(QWEN3), "--model", f"ggml-vocab-qwen3={LLAMA_SPM}"],
        capture_output=True, timeout=120,
    )
    assert done.returncode == 1
    assert done.stderr.decode().strip().splitlines()[-1] == (
        "bpetok: error: two vocabularies are named ggml-vocab-qwen3: name them apart with --model NAME=PATH"
    )
