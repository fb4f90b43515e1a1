"""The console page in a real browser: Debian's Chromium, driven by Playwright, against
`agentcore serve --console ADDR` (a real subprocess, every plugin discovered) serving a
real stdio MCPL server, with the loopback provider behind it.

The page, loaded once and never reloaded, shows a connected server and its grant; after a
429, the provider's hold counting down with its reason, the call waiting and why, and the
server's request in flight; then, once the retry succeeded, the released state. With
``[rate_limit.providers.a] max_in_flight`` set, the slots in use while slow calls run and a
call waiting for one, then none once they finished. Bound beyond loopback, a missing or
wrong token is refused and the right one is let in.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import socket
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from e2e_rig import PROVIDERS, settings_sections
from e2e_support import TIMEOUT_S, Hub, finish, serve, serving
from playwright.async_api import Browser, Page, async_playwright, expect

from agentcore.testing import API_KEY, LoopbackServer, Scenario

CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
"""Debian's Chromium (``make test`` installs it when missing); ``CHROMIUM=PATH`` names another."""
TOKEN = "console-e2e-token-4242"
SCREENSHOT_DIR_ENV = "CONSOLE_SCREENSHOT_DIR"
"""(Not AGENTCORE_*: `agentcore serve` refuses an AGENTCORE_ variable that names no section.)"""
"""Where a copy of the page's screenshot goes (the README's picture comes from here)."""
PAGE_TIMEOUT_MS = 15_000


@pytest.fixture
def transport() -> str:
    return "stdio"


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    if not os.access(CHROMIUM, os.X_OK):
        raise AssertionError(
            f"Chromium is needed at {CHROMIUM} for the console page test: `make test` installs "
            "it from Debian's packages as root (apt-get install chromium)"
        )
    async with async_playwright() as playwright:
        # --no-sandbox: CI runs as root, where Chromium's sandbox will not start.
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield browser
        finally:
            await browser.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def open_page(browser: Browser, url: str) -> Page:
    """The page once the console answers (serve may still be starting)."""
    page = await browser.new_page(viewport={"width": 1280, "height": 900})
    async with asyncio.timeout(TIMEOUT_S):
        while True:
            try:
                await page.goto(url)
                return page
            except Exception as exc:  # connection refused until the console listens
                if "ERR_CONNECTION_REFUSED" not in str(exc):
                    raise
                await asyncio.sleep(0.1)


async def test_the_page_shows_a_hold_a_waiting_call_and_a_request_then_the_release(
    browser: Browser,
    hub: Hub,
    loopback_provider: LoopbackServer,
    loopback_settings: Callable[..., Path],
    tmp_path: Path,
) -> None:
    loopback_provider.script(
        Scenario.rate_limit(retry_after=4), Scenario.text("Hello from the host"), provider="a"
    )
    servers = {"srv": hub.config("srv")}
    # The hold lasts exactly the stated 4 s (no release jitter), so the page counts from 4.
    limits = {
        "rate_limit": {"providers": {"a": {"max_in_flight": 4}}},
        "provider_hold": {"release_jitter": 0},
    }
    settings = loopback_settings(PROVIDERS, sections=settings_sections(hub, servers, extra=limits))
    port = free_port()
    async with serving(settings, args=("--console", f"127.0.0.1:{port}")) as served:
        session = await hub.next_session()
        await asyncio.wait_for(session.ready.wait(), TIMEOUT_S)
        page = await open_page(browser, f"http://127.0.0.1:{port}/")
        expect.set_options(timeout=PAGE_TIMEOUT_MS)
        await expect(page.locator("#linktext")).to_have_text("live")
        await page.evaluate("window.loadedOnce = true")  # gone if the page were reloaded

        server = page.locator('[data-server="srv"]')
        await expect(server.locator("[data-server-state]")).to_have_text("ready")
        await expect(server).to_contain_text("inferenceRequest.streaming")
        await expect(server).to_contain_text("fs.a")

        messages = [{"role": "user", "content": "Hi"}]
        rid = await session.request(
            "inference/request", {"featureSet": "fs.a", "stream": True, "messages": messages}
        )
        # The 429: the provider is held, counting down, with its reason.
        left = page.locator('[data-hold="a"] [data-hold-left]')
        await expect(left).to_be_visible()
        first = int(await left.get_attribute("data-hold-left") or 0)
        assert 1 <= first <= 4
        await expect(page.locator('[data-hold="a"]')).to_contain_text("rate_limit")
        await page.wait_for_function(
            "n => Number(document.querySelector('[data-hold=\"a\"] [data-hold-left]')"
            "?.dataset.holdLeft ?? 0) < n",
            arg=first,
        )
        # The call waits, saying why; the server's request is in flight.
        waiting = page.locator("[data-wait]")
        await expect(waiting).to_have_count(1)
        await expect(waiting).to_contain_text(re.compile(r"backoff|hold"))
        await expect(waiting).to_contain_text("a:claude-e2e")
        await expect(server.locator(f'[data-request="{rid}"]')).to_contain_text("fs.a")
        await expect(page.locator("[data-inference]")).to_have_count(1)
        await expect(page.locator('[data-slots="a"]')).to_have_text("0 / 4")  # the 429 gave it back
        screenshot = await page.screenshot(full_page=True)
        (tmp_path / "console.png").write_bytes(screenshot)
        if os.environ.get(SCREENSHOT_DIR_ENV):
            Path(os.environ[SCREENSHOT_DIR_ENV], "console.png").write_bytes(screenshot)

        # The retry succeeds: released, nothing waits, nothing in flight, one completed.
        answer = await session.answer(rid)
        assert answer.result["content"] == "Hello from the host"
        await expect(page.locator('[data-hold="a"]')).to_contain_text("open")
        await expect(waiting).to_have_count(0)
        await expect(server.locator("[data-server-requests]")).to_have_attribute(
            "data-server-requests", "0"
        )
        await expect(page.locator('[data-counter="completed"] b')).to_have_text("1")
        await expect(page.locator("[data-inference]")).to_have_count(0)
        assert await page.evaluate("window.loadedOnce") is True  # no reload happened
        assert API_KEY not in await page.content()
        code, _, stderr = await served.stop()
    assert code == 0, stderr


SLOW_S = 5.0
"""How long each of the first two calls keeps its slot: the page is read meanwhile."""


async def test_the_page_shows_rate_limit_slots_in_use_then_their_release(
    browser: Browser,
    hub: Hub,
    loopback_provider: LoopbackServer,
    loopback_settings: Callable[..., Path],
) -> None:
    # Two slow calls take both slots of provider a; a third waits for one (a limit wait).
    loopback_provider.script(
        Scenario.text("slow one", delay_s=SLOW_S),
        Scenario.text("slow two", delay_s=SLOW_S),
        Scenario.text("quick"),
        provider="a",
    )
    servers = {"srv": hub.config("srv")}
    limits = {"rate_limit": {"providers": {"a": {"max_in_flight": 2}}}}
    settings = loopback_settings(PROVIDERS, sections=settings_sections(hub, servers, extra=limits))
    port = free_port()
    base = f"http://127.0.0.1:{port}/"
    async with serving(settings, args=("--console", f"127.0.0.1:{port}")) as served:
        session = await hub.next_session()
        await asyncio.wait_for(session.ready.wait(), TIMEOUT_S)
        page = await open_page(browser, base)
        expect.set_options(timeout=PAGE_TIMEOUT_MS)
        await expect(page.locator("#linktext")).to_have_text("live")
        await page.evaluate("window.loadedOnce = true")  # gone if the page were reloaded

        messages = [{"role": "user", "content": "Hi"}]
        ids = [
            await session.request(
                "inference/request", {"featureSet": "fs.a", "stream": True, "messages": messages}
            )
            for _ in range(3)
        ]
        slots = page.locator('[data-slots="a"]')
        await expect(slots).to_have_attribute("data-in-use", "2")
        await expect(slots).to_have_text("2 / 2")
        waiting = page.locator("[data-wait]")
        await expect(waiting).to_have_count(1)
        await expect(waiting).to_contain_text("limit")
        await expect(page.locator('[data-server="srv"] [data-server-requests]')).to_have_attribute(
            "data-server-requests", "3"
        )
        status = await (await page.request.get(base + "status")).json()
        [provider] = [p for p in status["providers"] if p["name"] == "a"]
        assert provider["slots"] == {"inUse": 2, "limit": 2, "scope": "replica"}

        # Every call finishes: the slots drop back, on the same page.
        answers = [await session.answer(i) for i in ids]
        assert sorted(a.result["content"] for a in answers) == ["quick", "slow one", "slow two"]
        await expect(slots).to_have_attribute("data-in-use", "0")
        await expect(slots).to_have_text("0 / 2")
        await expect(waiting).to_have_count(0)
        await expect(page.locator('[data-counter="completed"] b')).to_have_text("3")
        assert await page.evaluate("window.loadedOnce") is True  # no reload happened
        status = await (await page.request.get(base + "status")).json()
        [provider] = [p for p in status["providers"] if p["name"] == "a"]
        assert provider["slots"] == {"inUse": 0, "limit": 2, "scope": "replica"}
        code, _, stderr = await served.stop()
    assert code == 0, stderr


async def test_beyond_loopback_a_missing_or_wrong_token_is_refused(
    browser: Browser,
    hub: Hub,
    loopback_settings: Callable[..., Path],
) -> None:
    servers = {"srv": hub.config("srv")}
    sections = settings_sections(
        hub, servers, extra={"console": {"token_env": "CONSOLE_E2E_TOKEN"}}
    )
    settings = loopback_settings(PROVIDERS, sections=sections)
    port = free_port()
    env = {**os.environ, "CONSOLE_E2E_TOKEN": TOKEN}
    async with serving(settings, env, args=("--console", f"0.0.0.0:{port}")) as served:
        session = await hub.next_session()
        await asyncio.wait_for(session.ready.wait(), TIMEOUT_S)
        base = f"http://127.0.0.1:{port}/"
        page = await open_page(browser, base)
        for url in (base, base + "?token=wrong", base + "status", base + "events"):
            response = await page.goto(url)
            assert response is not None and response.status == 401, url
            assert TOKEN not in await page.content()
        response = await page.goto(base + "?token=" + TOKEN)
        assert response is not None and response.status == 200
        await expect(page.locator("#linktext")).to_have_text("live", timeout=PAGE_TIMEOUT_MS)
        await expect(page.locator('[data-server="srv"] [data-server-state]')).to_have_text("ready")
        assert TOKEN not in await page.content()
        code, stdout, stderr = await served.stop()
    assert code == 0, stderr
    assert TOKEN not in stdout + stderr


async def test_serve_refuses_to_bind_beyond_loopback_without_a_token(
    hub: Hub, loopback_settings: Callable[..., Path]
) -> None:
    settings = loopback_settings(PROVIDERS)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTCORE_")}
    process = await serve(settings, env, args=("--console", f"0.0.0.0:{free_port()}"))
    code, _, stderr = await finish(process)
    assert code == 2, stderr
    assert "console" in stderr and "not loopback" in stderr
