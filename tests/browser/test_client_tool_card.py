"""A client tool call in the workbench (docs/client-tools.md): the card shows the pending call
and lets a person answer it by hand when its client is gone; a result the client gave first
(here: over the API, as another device would) closes the form in every tab watching."""

from __future__ import annotations

from tests.support.browser import LOOP, Browser, StackFactory, require_browser

require_browser()
pytestmark = LOOP

from playwright.async_api import expect  # noqa: E402

from tests.support.pages import (  # noqa: E402
    TIMEOUT_MS,
    assert_matches_server,
    create_via_api,
    expect_status,
    expect_status_word,
    login,
)

TOOLS = [{"name": "get_weather", "description": "The weather in a city.",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]


async def test_a_person_answers_a_client_tool_call_by_hand(
    stacks: StackFactory, browser: Browser
) -> None:
    stack = await stacks(speed=10)
    key = await stack.new_key("alice")
    sid = await create_via_api(stack, key, 'call get_weather {"city": "Oslo"}',
                               client_tools=TOOLS)
    page, _ = await browser.new_page()
    await login(page, stack, key, hash_=f"#/s/{sid}")
    card = page.get_by_test_id("client-tool")
    await expect(card).to_have_attribute("data-status", "pending", timeout=TIMEOUT_MS)
    await expect(card.get_by_test_id("client-tool-name")).to_have_text("get_weather")
    await expect(card.get_by_test_id("client-tool-args")).to_contain_text('"city": "Oslo"')
    await expect_status(page, "running")  # no worker holds it
    await expect_status_word(page, "waiting on client tools")
    rail = page.locator(f'[data-testid=rail-item][data-session-id="{sid}"]')
    await expect(rail.get_by_test_id("rail-status")).to_have_text("waiting on client tools")

    await card.get_by_test_id("client-tool-output").fill('{"temp_c": 21}')
    await card.get_by_test_id("client-tool-send").click()
    await expect(card).to_have_attribute("data-status", "answered", timeout=TIMEOUT_MS)
    await expect(card.get_by_test_id("client-tool-form")).to_be_hidden()
    await expect_status(page, "succeeded")
    # The model got what the person typed, as JSON.
    async with stack.client(key) as c:
        r = await c.get(f"/v1/sessions/{sid}/tool-calls")
        (call,) = r.json()["tool_calls"]
        assert (call["status"], call["result"]) == ("answered", {"output": {"temp_c": 21}})
    await assert_matches_server(page, stack, key, sid)


async def test_a_result_from_elsewhere_closes_the_form_and_an_error_is_sent_as_one(
    stacks: StackFactory, browser: Browser
) -> None:
    stack = await stacks(speed=10)
    key = await stack.new_key("alice")
    answered = await create_via_api(stack, key, 'call get_weather {"city": "Oslo"}',
                                    client_tools=TOOLS)
    failed = await create_via_api(stack, key, 'call get_weather {"city": "Rome"}',
                                  client_tools=TOOLS)
    page, _ = await browser.new_page()
    await login(page, stack, key, hash_=f"#/s/{answered}")
    card = page.get_by_test_id("client-tool")
    await expect(card).to_have_attribute("data-status", "pending", timeout=TIMEOUT_MS)
    async with stack.client(key) as c:
        r = await c.post(f"/v1/sessions/{answered}/tool-results",
                         json={"call_id": await card.get_attribute("data-call-id"),
                               "output": {"temp_c": 30}})
        assert r.status_code == 200, r.text
    await expect(card).to_have_attribute("data-status", "answered", timeout=TIMEOUT_MS)
    await expect(card.get_by_test_id("client-tool-form")).to_be_hidden()
    await expect_status(page, "succeeded")

    await page.evaluate(f"location.hash = '#/s/{failed}'")
    card = page.get_by_test_id("client-tool")
    await expect(card).to_have_attribute("data-status", "pending", timeout=TIMEOUT_MS)
    await card.get_by_test_id("client-tool-output").fill("the sensor is offline")
    await card.get_by_test_id("client-tool-fail").click()
    await expect(card).to_have_attribute("data-status", "failed", timeout=TIMEOUT_MS)
    await expect_status(page, "succeeded")
    async with stack.client(key) as c:
        r = await c.get(f"/v1/sessions/{failed}/tool-calls")
        (call,) = r.json()["tool_calls"]
        assert call["result"] == {"error": {"message": "the sensor is offline"}}
