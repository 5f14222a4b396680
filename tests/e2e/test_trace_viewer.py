"""``core-agent ui``: the trace viewer as a person uses it, in a real headless Chromium.

One viewer process and one browser serve the whole module. The tasks are made by the real
command line first: one that succeeded (a calculator call), and two waiting for a human
(every call needs approval at threshold ``low``). The viewer runs with the same settings, so
an approval given on its page resumes the task in the viewer's own kernel.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx
import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import Select, WebDriverWait

from core_agent import create_kernel
from core_agent.contracts.settings import AgentSettings
from shared.agent_protocol import RiskLevel, TaskRequest, TaskStatus
from support.chromium import headless_chromium

CLI = Path(sys.executable).with_name("core-agent")
WAIT_S = 60  # generous: the suite runs beside other work on two cores


@dataclass(frozen=True)
class Viewer:
    url: str
    base: str
    token: str
    port: int
    data_dir: Path
    env: dict[str, str]


def _environment(data_dir: Path) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_")}
    # At "low" every call needs a human: nobody answers at a pipe, so the task waits.
    return {**base, "AGENT_DATA_DIR": str(data_dir), "AGENT_POLICY_APPROVAL_REQUIRED_RISK": "low"}


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CLI), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        stdin=subprocess.DEVNULL,
    )


async def _tasks(data_dir: Path) -> None:
    """One task that ran a calculator call, then two that wait for a human's decision."""
    async with create_kernel(AgentSettings(data_dir=data_dir)) as kernel:
        done = await kernel.execute_task(TaskRequest(task="2 ** 10"))
        assert done.status is TaskStatus.SUCCEEDED, done.error
    # At "low" every call needs a human, and no one is asked here: the tasks wait, durably.
    waiting = AgentSettings(data_dir=data_dir, policy_approval_required_risk=RiskLevel.LOW)
    async with create_kernel(waiting) as kernel:
        for task in ("What is 6 * 7?", "What is 5 + 5?"):
            result = await kernel.execute_task(TaskRequest(task=task))
            assert result.status is TaskStatus.WAITING_APPROVAL, result.error


@pytest.fixture(scope="module")
def viewer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Viewer]:
    data_dir = tmp_path_factory.mktemp("viewer") / "data"
    env = _environment(data_dir)
    anyio.run(_tasks, data_dir)
    with subprocess.Popen(
        [str(CLI), "ui", "--port", "0", "--no-open"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    ) as process:
        assert process.stdout is not None and process.stderr is not None
        try:
            ready, _, _ = select.select([process.stdout], [], [], WAIT_S)
            assert ready, "core-agent ui printed no URL"
            url = process.stdout.readline().strip()
            # Loopback only, with a fresh token of its own.
            assert url.startswith("http://127.0.0.1:"), (url, process.poll())
            parts = urlsplit(url)
            token = parse_qs(parts.query)["token"][0]
            assert len(token) >= 32 and parts.port is not None
            yield Viewer(url, f"http://127.0.0.1:{parts.port}", token, parts.port, data_dir, env)
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                status = process.wait(timeout=WAIT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                raise
        stderr = process.stderr.read()
    # Stopped gracefully: the stores closed, nothing went wrong on the way.
    assert status == 0, stderr
    assert "Traceback" not in stderr, stderr


@pytest.fixture(scope="module")
def browser(viewer: Viewer) -> Iterator[webdriver.Chrome]:
    with headless_chromium() as chrome:
        yield chrome


def _rows(browser: webdriver.Chrome) -> list[tuple[str, str]]:
    return [
        (
            row.find_element(By.CSS_SELECTOR, ".task-text").text,
            row.find_element(By.CSS_SELECTOR, ".status").text,
        )
        for row in browser.find_elements(By.CSS_SELECTOR, "tr.task")
    ]


def _follow(browser: webdriver.Chrome, element: WebElement) -> None:
    """Click a link or button and wait for the page it leads to."""
    page = browser.find_element(By.TAG_NAME, "html")
    element.click()

    def left(_: webdriver.Chrome) -> bool:
        try:
            page.is_enabled()
        except StaleElementReferenceException:
            return True
        except WebDriverException as exc:
            # What Chrome answers about a node of the page it is tearing down.
            if "does not belong to the document" in str(exc):
                return True
            raise
        return False

    WebDriverWait(browser, WAIT_S).until(left)


def _filter(browser: webdriver.Chrome, *, status: str = "", text: str = "") -> None:
    Select(browser.find_element(By.ID, "filter-status")).select_by_value(status)
    box = browser.find_element(By.ID, "filter-text")
    box.clear()
    box.send_keys(text)
    _follow(browser, browser.find_element(By.CSS_SELECTOR, "#filters button[type=submit]"))


def test_the_task_list_shows_every_task_and_filters_them(browser, viewer) -> None:
    browser.get(viewer.url)
    rows = _rows(browser)
    assert ("2 ** 10", "succeeded") in rows
    assert ("What is 5 + 5?", "waiting_approval") in rows
    assert [text for text, _ in rows].index("What is 5 + 5?") == 0  # newest first
    # The stylesheet came from the viewer itself (with the token): the header is dark.
    header = browser.find_element(By.TAG_NAME, "header")
    assert header.value_of_css_property("background-color") == "rgba(36, 41, 47, 1)"

    _filter(browser, status="succeeded")
    assert _rows(browser) == [("2 ** 10", "succeeded")]
    _filter(browser, text="5 + 5")
    assert [text for text, _ in _rows(browser)] == ["What is 5 + 5?"]
    _filter(browser, text="no task says this")
    assert browser.find_element(By.ID, "no-tasks").text == "No task matches these filters."


def test_a_task_shows_its_span_waterfall_and_conversation(browser, viewer) -> None:
    browser.get(viewer.url)
    row = next(
        r
        for r in browser.find_elements(By.CSS_SELECTOR, "tr.task")
        if r.find_element(By.CSS_SELECTOR, ".task-text").text == "2 ** 10"
    )
    _follow(browser, row.find_element(By.CSS_SELECTOR, "a.task-link"))
    assert browser.find_element(By.ID, "task-output").text == "2 ** 10 = 1024"

    spans = browser.find_elements(By.CSS_SELECTOR, "#waterfall tr.span")
    kinds = [span.get_attribute("data-kind") for span in spans]
    assert {"planning", "task", "llm", "tool", "policy"} <= set(kinds)
    depth = {
        kind: int(span.get_attribute("data-depth") or 0)
        for kind, span in zip(kinds, spans, strict=True)
    }
    # Nested by parent: the policy check under the tool call, under the task.
    assert depth["task"] < depth["tool"] < depth["policy"]
    by_kind = {kind: span for kind, span in zip(kinds, spans, strict=True)}
    llm = by_kind["llm"]
    tokens_in, tokens_out = llm.find_element(By.CSS_SELECTOR, ".tokens").text.split("/")
    assert int(tokens_in) > 0 and int(tokens_out) > 0
    assert llm.find_element(By.CSS_SELECTOR, ".cost").text.startswith("$")
    assert by_kind["tool"].find_element(By.CSS_SELECTOR, ".duration").text.endswith(" ms")
    # Bars a person can see, placed in time: the tool call starts within the task's bar.
    bars = {kind: span.find_element(By.CSS_SELECTOR, "rect") for kind, span in by_kind.items()}
    assert all(bar.size["width"] > 0 for bar in bars.values())
    task_bar, tool_bar = bars["task"], bars["tool"]
    assert task_bar.location["x"] <= tool_bar.location["x"]
    assert (
        tool_bar.location["x"] + tool_bar.size["width"]
        <= task_bar.location["x"] + task_bar.size["width"] + 1
    )

    conversation = browser.find_element(By.ID, "conversation").text
    assert "user: 2 ** 10" in conversation
    assert 'call: calculator({"expression": "2 ** 10"})' in conversation
    assert "result (calculator): 1024" in conversation
    decisions = browser.find_element(By.ID, "decisions").text
    assert "policy calculator low tool-check:calculator allowed" in decisions


def test_an_approval_answered_on_the_page_resumes_the_task(browser, viewer) -> None:
    browser.get(viewer.url)
    _follow(browser, browser.find_element(By.ID, "nav-approvals"))
    request = next(
        article
        for article in browser.find_elements(By.CSS_SELECTOR, "article.approval")
        if '"6 * 7"' in article.find_element(By.CSS_SELECTOR, ".arguments").text
    )
    assert "calculator call" in request.find_element(By.TAG_NAME, "h3").text
    request.find_element(By.CSS_SELECTOR, "input.reason").send_keys("go ahead")
    _follow(browser, request.find_element(By.CSS_SELECTOR, "button.approve"))

    # The page of the task follows, and refreshes itself until the run has ended.
    WebDriverWait(browser, WAIT_S, ignored_exceptions=[StaleElementReferenceException]).until(
        lambda b: b.find_element(By.ID, "task-status").text == "succeeded"
    )
    assert browser.find_element(By.ID, "task-output").text == "6 * 7 = 42"
    conversation = browser.find_element(By.ID, "conversation").text
    assert "human: approved (once): go ahead" in conversation
    assert "result (calculator): 42" in conversation  # the tool ran, in the viewer's process
    assert "approved (once) by trace viewer" in browser.find_element(By.ID, "decisions").text
    kinds = [
        span.get_attribute("data-kind")
        for span in browser.find_elements(By.CSS_SELECTOR, "#waterfall tr.span")
    ]
    assert "tool" in kinds
    # It no longer waits: the approvals page lists only the other request.
    _follow(browser, browser.find_element(By.ID, "nav-approvals"))
    (left,) = browser.find_elements(By.CSS_SELECTOR, "article.approval .arguments")
    assert '"5 + 5"' in left.text


def test_every_request_without_the_token_is_refused(viewer) -> None:
    with httpx.Client(base_url=viewer.base) as client:
        for path in ("/", "/tasks/last", "/approvals", "/static/viewer.css"):
            assert client.get(path).status_code == 403, path
            assert client.get(path, params={"token": "wrong"}).status_code == 403, path
            assert client.get(path, params={"token": viewer.token}).status_code == 200, path
        refused = client.get("/")
        assert "the URL `core-agent ui` printed" in refused.text
        # A page under another name that resolves to 127.0.0.1 (DNS rebinding) gets nothing.
        rebound = client.get(
            "/", params={"token": viewer.token}, headers={"host": f"evil.example:{viewer.port}"}
        )
        assert rebound.status_code == 403 and "Host" in rebound.text


def test_a_decision_from_another_site_is_refused_and_the_request_still_waits(viewer) -> None:
    deny = {"decision": "deny", "reason": "no"}
    own = {"origin": viewer.base}
    with httpx.Client(base_url=viewer.base, params={"token": viewer.token}) as client:
        listed = client.get("/approvals").text.split('<article class="approval" id="approval-')
        (request_id,) = [part.split('"')[0] for part in listed[1:] if "5 + 5" in part]
        path = f"/approvals/{request_id}"
        foreign = client.post(
            path, data={**deny, "token": viewer.token}, headers={"origin": "http://evil.example"}
        )
        assert foreign.status_code == 403 and "another site" in foreign.text
        # The token in the URL alone is not enough to act: the form must carry it too.
        formless = client.post(path, data=deny, headers=own)
        assert formless.status_code == 403 and "token" in formless.text
        assert path in client.get("/approvals").text  # still waiting

        denied = client.post(path, data={**deny, "token": viewer.token}, headers=own)
        assert denied.status_code == 303
        assert denied.headers["location"].startswith("/tasks/")
        again = client.post(path, data={**deny, "token": viewer.token}, headers=own)
        assert again.status_code == 409 and "no longer waits" in again.text


def test_a_port_in_use_is_a_clear_error(viewer) -> None:
    taken = _cli("ui", "--port", str(viewer.port), "--no-open", env=viewer.env)
    assert taken.returncode == 2
    assert f"port {viewer.port} on 127.0.0.1 is in use" in taken.stderr
    assert taken.stdout == ""
    for port, problem in (("70000", "a port is 0 to 65535"), ("http", "not a port number")):
        wrong = _cli("ui", "--port", port, env=viewer.env)
        assert wrong.returncode == 2 and problem in wrong.stderr
