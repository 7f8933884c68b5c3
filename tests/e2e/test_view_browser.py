"""`arthex view` in a real browser: Debian's chromium, headless, driven by Playwright's client.

One browser session for the module; the tests run in order, as a person would browse: the
runs page, a click into a run and its chart, the trajectories of a step (a planted message,
a message that looks like a script), the checkpoints; then nothing under PATH has changed;
then a row a trainer appends shows up without a reload. Each page is screenshotted into a
temp dir (or into $ARTHEX_VIEW_SCREENSHOTS, which is how docs/view/*.png are made).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests._view_runs import PLANTED, SCRIPT, VAL_MEANS, Viewer, build_runs, snapshot, viewer

pytestmark = pytest.mark.e2e

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
WAIT_MS = 15_000


def expect(locator: Any) -> Any:
    from playwright.sync_api import expect as playwright_expect

    playwright_expect.set_options(timeout=WAIT_MS)
    return playwright_expect(locator)


def _chromium() -> str:
    path = shutil.which("chromium") or (CHROMIUM if os.path.exists(CHROMIUM) else None)
    if path is None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("chromium is not installed; `make browser` (in `make test`) installs it")
        pytest.skip("chromium is not installed (`make browser` installs it); not in CI, so skipped")
    return path


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_runs(tmp_path_factory.mktemp("runs"))


@pytest.fixture(scope="module")
def before(base: Path) -> dict[str, tuple[int, str]]:
    return snapshot(base)


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    chosen = os.environ.get("ARTHEX_VIEW_SCREENSHOTS")
    if chosen:
        Path(chosen).mkdir(parents=True, exist_ok=True)
        return Path(chosen)
    return tmp_path_factory.mktemp("screenshots")


@pytest.fixture(scope="module")
def view(base: Path, before: dict[str, tuple[int, str]]) -> Iterator[Viewer]:
    with viewer([str(base)]) as running:
        yield running


@pytest.fixture(scope="module")
def page(view: Viewer) -> Iterator[Any]:
    executable = _chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=ARGS)
        try:
            context = browser.new_context(viewport={"width": 1440, "height": 900})
            opened = context.new_page()
            opened.set_default_timeout(WAIT_MS)
            problems: list[str] = []
            opened.on("pageerror", lambda error: problems.append(str(error)))
            opened.on(
                "request",
                lambda request: (
                    None
                    if request.url.startswith(("http://127.0.0.1:", "data:"))
                    else problems.append(f"fetched from elsewhere: {request.url}")
                ),
            )
            yield opened
            assert problems == []
        finally:
            browser.close()


def test_the_runs_page_lists_the_runs(page: Any, view: Viewer, shots: Path) -> None:
    page.goto(view.url)
    row = page.locator('tr[data-run="proj/agent"]')
    row.wait_for()
    assert row.locator("td").nth(2).text_content() == str(len(VAL_MEANS) - 1)
    assert f"val/reward {max(VAL_MEANS)} @ step 1" in row.text_content()
    assert page.locator('tr[data-run="other/evals"]').count() == 1
    page.screenshot(path=str(shots / "runs.png"), full_page=True)


def test_a_click_opens_the_run_and_its_chart(page: Any, shots: Path) -> None:
    page.click('tr[data-run="proj/agent"] a.run-link')
    page.locator("#chart canvas").first.wait_for(state="visible")
    box = page.locator("#chart canvas").first.bounding_box()
    assert box is not None and box["width"] > 300 and box["height"] > 150
    legend = page.locator("#chart .u-legend").text_content()
    assert "val/reward" in legend and "train/reward" in legend
    assert page.locator("#best-text").text_content().endswith(f"{max(VAL_MEANS)} at step 1")
    assert page.locator("#run-step").text_content() == str(len(VAL_MEANS) - 1)
    page.screenshot(path=str(shots / "metrics.png"), full_page=True)


def test_trajectories_show_the_planted_message_and_scripts_as_text(page: Any, shots: Path) -> None:
    page.click("#tab-trajectories")
    page.locator("#split-select").wait_for()
    page.select_option("#split-select", "val")
    expect(page.locator("#traj-summary")).to_contain_text("val ·")
    page.select_option("#step-select", "2")
    planted = page.get_by_text(PLANTED, exact=True)
    planted.wait_for(state="visible")
    script = page.get_by_text(SCRIPT, exact=True)
    assert script.is_visible()  # the markup itself is on the page, as text
    assert page.title() == "arthex view"  # the script never ran
    assert page.locator(".groups b", has_text="bold?").count() == 0  # and <b> is no element
    assert page.locator('.group[data-group="0"] .call').first.text_content() == (
        '→ get_weather({"city": "Paris-0"})'
    )
    assert page.locator('.group[data-group="0"] .exc').text_content().startswith("RuntimeError")
    page.check("#tokens")
    page.locator(".tokens .tok").first.wait_for()
    page.get_by_text(PLANTED, exact=True).wait_for()
    page.screenshot(path=str(shots / "trajectories.png"), full_page=True)
    page.locator('.group[data-group="1"] .diff-button').click()
    diff = page.locator("#diff").text_content()
    assert f"+ assistant: {PLANTED}" in diff and f"- assistant: {SCRIPT}" in diff
    page.locator('.group[data-group="1"] .across-button').click()
    across = page.locator("#across tbody tr")
    expect(across).to_have_count(len(VAL_MEANS))  # the scenario at every val step
    assert PLANTED in across.nth(2).text_content()


def test_search_finds_the_planted_message(page: Any) -> None:
    page.fill("#search", "atlantis is poseidonia")
    page.press("#search", "Enter")
    expect(page.locator("#traj-summary")).to_contain_text("1 group(s) matching")
    assert page.locator(".group").count() == 1
    assert page.get_by_text(PLANTED, exact=True).is_visible()


def test_the_checkpoints_page_says_what_retention_keeps(page: Any, shots: Path) -> None:
    page.click("#tab-checkpoints")
    row = page.locator('#checkpoints tr[data-step="1"]')
    row.wait_for()
    assert "kept" in row.text_content() and "best val/reward" in row.text_content()
    assert "would be deleted" in page.locator('#checkpoints tr[data-step="0"]').text_content()
    assert "latest" in page.locator('#checkpoints tr[data-step="3"]').text_content()
    page.screenshot(path=str(shots / "checkpoints.png"), full_page=True)


def test_browsing_changed_nothing_under_path(
    page: Any, base: Path, before: dict[str, tuple[int, str]]
) -> None:
    page.wait_for_timeout(2500)  # at least one poll of the page just browsed
    assert snapshot(base) == before


def test_a_new_history_row_appears_without_a_reload(page: Any, view: Viewer, base: Path) -> None:
    page.click("#crumbs a >> text=proj/agent")
    page.locator("#chart canvas").first.wait_for(state="visible")
    page.evaluate("window.__same_document = true")
    rows_before = page.locator("#rows-count").text_content()

    logger = (  # another process appends the row, as an evaluator would
        "import asyncio, sys, arthex\n"
        "model = arthex.Model(name='agent', project='proj', base_path=sys.argv[1],"
        " report_metrics=[])\n"
        "asyncio.run(model.log(metrics={'reward': 0.97}, split='val', step=4))\n"
    )
    subprocess.run([sys.executable, "-c", logger, str(base)], check=True, timeout=120)
    expect(page.locator("#last-rows tr td").first).to_have_text("4")
    assert page.locator("#rows-count").text_content() != rows_before
    assert page.locator("#best-text").text_content().endswith("0.97 at step 4")
    assert page.evaluate("window.__same_document") is True  # no reload happened


def test_a_newly_logged_step_replaces_the_newest_one_shown(page: Any, base: Path) -> None:
    page.click("#tab-trajectories")
    page.select_option("#split-select", "val")
    expect(page.locator("#traj-summary")).to_contain_text("val · step 3")
    logger = (  # an evaluator logs step 5 of the val split in another process
        "import asyncio, sys, arthex\n"
        "from tests._view_runs import val_groups\n"
        "model = arthex.Model(name='agent', project='proj', base_path=sys.argv[1],"
        " report_metrics=[])\n"
        "asyncio.run(model.log(val_groups(2), split='val', step=5))\n"
    )
    subprocess.run([sys.executable, "-c", logger, str(base)], check=True, timeout=120)
    expect(page.locator("#traj-summary")).to_contain_text("val · step 5 · 2 group(s)")
    assert page.get_by_text(PLANTED, exact=True).is_visible()


def test_a_damaged_file_is_named_on_the_page_and_the_rest_shows(
    page: Any, base: Path, tmp_path: Path
) -> None:
    damaged = tmp_path / "runs"
    shutil.copytree(base, damaged)
    run = damaged / "proj/models/agent"
    bad = run / "trajectories/val/0001.parquet"
    bad.write_bytes(b"PAR1 not parquet PAR1")
    history = run / "history.jsonl"
    lines = history.read_bytes().splitlines(keepends=True)
    history.write_bytes(b"".join([*lines[:3], b"{torn\n", *lines[3:]]))
    with viewer([str(damaged)]) as other:
        page.goto(f"{other.base}/#/run/proj/agent/trajectories?split=val&step=1")
        expect(page.locator(".error-line", has_text=str(bad))).to_have_count(1)
        expect(page.locator(".error-line", has_text=f"line 4 of {history}")).to_have_count(1)
        page.select_option("#step-select", "2")
        page.get_by_text(PLANTED, exact=True).wait_for(state="visible")
        page.click("#tab-metrics")
        page.locator("#chart canvas").first.wait_for(state="visible")
        expect(page.locator(".error-line", has_text=f"line 4 of {history}")).to_have_count(1)


def test_four_groups_fit_a_1280_pixel_window(page: Any, tmp_path: Path, shots: Path) -> None:
    """A step of four groups, one with an unbroken 400-character exception: nothing on the
    trajectories page reaches past the window's right edge, and nothing scrolls sideways."""
    import asyncio
    import concurrent.futures

    import arthex
    from arthex.testing.builders import make_exception
    from tests._view_runs import val_groups

    groups = [*val_groups(0), *val_groups(1)]
    groups[3] = arthex.TrajectoryGroup([*groups[3].trajectories, make_exception("x" * 400)])
    model = arthex.Model(name="wide", project="proj", base_path=str(tmp_path), report_metrics=[])
    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # playwright's loop runs here
        pool.submit(asyncio.run, model.log(groups, split="val", step=0)).result()
    page.set_viewport_size({"width": 1280, "height": 900})
    try:
        with viewer([str(tmp_path)]) as other:
            page.goto(f"{other.base}/#/run/proj/wide/trajectories?split=val&step=0")
            expect(page.locator(".group")).to_have_count(4)
            page.locator(".group .exc").last.wait_for(state="visible")
            page.screenshot(path=str(shots / "trajectories-1280.png"), full_page=True)
            widths = page.evaluate(
                "() => ({page: document.documentElement.scrollWidth,"
                " window: document.documentElement.clientWidth,"
                " groups: [...document.querySelectorAll('.groups')].map("
                "   g => g.scrollWidth - g.clientWidth),"
                " right: Math.max(...[...document.querySelectorAll('.group, .group *')].map("
                "   e => e.getBoundingClientRect().right))})"
            )
    finally:
        page.set_viewport_size({"width": 1440, "height": 900})
    assert widths["page"] <= widths["window"], widths
    assert all(extra == 0 for extra in widths["groups"]), widths
    assert widths["right"] <= widths["window"], widths
