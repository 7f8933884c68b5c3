"""The viewer's page needs nothing from outside the package: every asset index.html names is a
file shipped under `arthex/apps/view/static`, and no asset names another origin."""

from __future__ import annotations

import re
from importlib import resources

STATIC = resources.files("arthex.apps.view") / "static"


def test_every_asset_of_the_page_is_shipped_in_the_package() -> None:
    html = (STATIC / "index.html").read_text()
    named = re.findall(r'(?:src|href)="([^"]+)"', html)
    assets = [n for n in named if not n.startswith(("data:", "#"))]
    assert "static/view.js" in assets and "static/vendor/uplot/uPlot.iife.min.js" in assets
    for asset in assets:
        assert not re.match(r"[a-z]+:|//", asset), f"{asset} is fetched from elsewhere"
        assert (STATIC / asset.removeprefix("static/")).is_file(), asset
    assert (STATIC / "vendor" / "uplot" / "LICENSE").read_text().startswith("The MIT License")


def test_no_stylesheet_or_script_of_ours_reaches_another_origin() -> None:
    for name in ("view.js", "view.css", "vendor/uplot/uPlot.min.css"):
        text = (STATIC / name).read_text()
        assert not re.search(r"url\(\s*['\"]?(https?:)?//", text), name
        assert 'fetch("http' not in text and "@import" not in text, name
